// The subject domain's door: the Subject type and its list, routes, and what the user, data, portal and
// tenant-apply domains read or write of subjects.
export {
  type SubjectConfig,
  type SubjectFilters,
  findSubjectFieldKeys,
  findSubjectId,
  findSubjectIdsByFirstValue,
  findSubjectsByIds,
  isUuid,
  loadSubjectConfig,
  lockSubjectById,
  matchingSubjectsQuery,
  subjectsLocatedIn,
} from './subject.repository.js';
export { subjectRoutes } from './subject.routes.js';
export { CustomFieldValueFilterInput, SubjectConnection, SubjectRef, subjectUuid } from './subject.schema.js';
export {
  type SubjectCaches,
  type SubjectFieldsPart,
  type SubjectIndexSnapshot,
  type SubjectListInput,
  applySubjectFields,
  createSubjects,
  listSubjects,
  subjectCaches,
  subjectConfig,
  subjectFilters,
  subjectIndexSnapshot,
  upsertSubject,
} from './subject.service.js';
export { firstText, matchingKeyOf, valueRows } from './subject-values.js';
