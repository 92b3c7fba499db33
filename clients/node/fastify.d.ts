// Fastify's request and route config, augmented with what the plugin adds. Kept apart from
// index.d.ts so that Express-only projects need no fastify types:
//   import type {} from 'pg-idem-http/fastify';
import type { IdemContext, RouteIdempotency } from './index';

declare module 'fastify' {
  interface FastifyRequest {
    idem: IdemContext | null;
    rawBody: Buffer | null;
  }
  interface FastifyContextConfig {
    idempotency?: RouteIdempotency;
  }
}
