// The auth domain's door: what the app, the entry points and other domains may use.
export { authRoutes } from './auth.routes.js';
export { type ClientsPart, applyClients } from './auth.service.js';
export { type Gate, type TokenHolder, authenticate, clientPrincipal, requireToken } from './authenticate.js';
export { findClientByTenantKey } from './auth.repository.js';
export { type ClientAuthOptions, addressKey } from './client-auth.js';
export { PrincipalCache, announcePrincipalsChanged } from './principal-cache.js';
export { hashSecret, isSecretHash, verifySecret } from './secrets.js';
export { TokenService } from './tokens.js';
