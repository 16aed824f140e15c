import { dataRoutes } from '../domains/data/index.js';
import { portalRoutes } from '../domains/portal/index.js';
import { structuralEntityRoutes } from '../domains/structural-entity/index.js';
import { subjectRoutes } from '../domains/subject/index.js';
import { userRoutes } from '../domains/user/index.js';
import type { RouteDef } from '../http/rest/route.js';

/** The REST route table: every documented path, in the contract's order. */
export const routes: readonly RouteDef[] = [...subjectRoutes, ...portalRoutes, ...structuralEntityRoutes, ...userRoutes, ...dataRoutes];
