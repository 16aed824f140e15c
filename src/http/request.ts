import type { Principal } from '../core/permissions.js';

// What the service adds to an Express request: who its token speaks for, set by the authentication
// middleware before any route or /graphql runs.
declare module 'express-serve-static-core' {
  interface Request {
    principal?: Principal;
  }
}
