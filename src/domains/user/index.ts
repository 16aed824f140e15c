// The user domain's door (D9): its GraphQL types (registered on import) and routes.
import './user.schema.js';
export { findGroupKeys } from './user.repository.js';
export { userRoutes } from './user.routes.js';
export { type GroupsPart, type UsersPart, applyGroups, applyUsers } from './user.service.js';
