// The portal domain's door (D9): its GraphQL types (registered on import), routes, the outbox sender and
// the invitation template's placeholders (the tenant file checks them).
import './portal.schema.js';
export { INVITATION_PLACEHOLDERS, unknownPlaceholders } from './invitation-mail.js';
export { OutboxSender } from './outbox.sender.js';
export { portalRoutes } from './portal.routes.js';
export { type PortalPart, applyPortalConfig } from './portal.service.js';
