// The structural-entity domain's door (D8): the hierarchy's GraphQL types, routes and what the
// subject, user, data and tenant-apply domains read or write of it.
export {
  type StructureTypeWithFields,
  findEntitiesByKeys,
  findEntityIdsByKeys,
  findEntityKeys,
  findStructureTypeKeys,
  findStructureTypes,
  shareLockEntitiesByKeys,
} from './structural-entity.repository.js';
export {
  RestStructuralEntitySchema,
  exampleHeadOffice,
  exampleSalesNorth,
  structuralEntityRoutes,
  toRestEntity,
} from './structural-entity.routes.js';
export { StructuralEntityConnection, StructuralEntityRef, StructureTypeRef } from './structural-entity.schema.js';
export {
  type StructuralEntitiesPart,
  type StructureTypesCache,
  type StructureTypesPart,
  applyStructuralEntities,
  applyStructureTypes,
  entityOrder,
  structureTypesCache,
} from './structural-entity.service.js';
