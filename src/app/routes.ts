import { dataRoutes } from '../domains/data/index.js';
import { portalRoutes } from '../domains/portal/portal.routes.js';
import { structuralEntityRoutes } from '../domains/structural-entity/structural-entity.routes.js';
import { subjectRoutes } from '../domains/subject/subject.routes.js';
import { userRoutes } from '../domains/user/user.routes.js';
import type { RouteDef } from '../http/rest/route.js';

/** The REST route table: every documented path, in the contract's order. */
export const routes: readonly RouteDef[] = [...subjectRoutes, ...portalRoutes, ...structuralEntityRoutes, ...userRoutes, ...dataRoutes];
