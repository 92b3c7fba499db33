// Types of pg-idem-http. The frameworks' and pg's types are referenced structurally where the
// package does not need them, so using it does not force @types/express or fastify on anyone.
import type { Pool, PoolClient } from 'pg';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** A response as the package handles it: status, headers, body's exact bytes. */
export interface CapturedResponse {
  status: number;
  headers: Array<[string, string | number | string[]]>;
  body: Buffer;
}

/** Options of one route (or, for the Fastify plugin, the defaults of every route). */
export interface IdempotencyOptions {
  /** The node-postgres pool. Queries never carry a `name` (PgBouncer in transaction mode). */
  pool: Pool;
  /** The method in the scoped key; default: the request's. */
  method?: string;
  /** The route template, e.g. `/orders/{id}`; default: derived from the framework's route (`:id` -> `{id}`). */
  route?: string;
  /** A key is required (400 key_missing without one); false: no key runs in a plain transaction. Default true. */
  required?: boolean;
  /** How long the key is kept, as an interval (`'1 day'`); default: the database's. */
  ttl?: string | null;
  /** Lease mode: the lease as an interval (`'30 seconds'`); the handler runs outside a transaction. */
  lease?: string | null;
  /** Fingerprint these JSON fields (idem_request_hash) instead of the body's bytes. */
  fields?: string[] | null;
  /** The tenant, from the application's auth; default `contract.defaults.tenant`. */
  tenant?: (req: any) => string | null | undefined | Promise<string | null | undefined>;
  /** Default `Idempotency-Key`. */
  keyHeader?: string;
  /** Default `Idempotent-Replayed`. */
  replayHeader?: string;
  /** Lower-case names of the headers stored with the response. Default content-type, location, etag. */
  storedHeaders?: string[];
  statementTimeoutMs?: number;
  idleInTransactionTimeoutMs?: number;
  /** Retry-After when no lease tells better (in_progress of an uncommitted claim, lease_lost, unavailable). */
  retryAfterSeconds?: number;
  /** Largest body read for the fingerprint, in bytes (413 above). Default 1 MiB. */
  limit?: number;
  /** Where unexpected errors (500s) are reported. Default console.error. */
  log?: (err: unknown) => void;
}

/** What a handler gets as `req.idem` (Express) / `request.idem` (Fastify). */
export interface IdemContext {
  /** `transaction`: claim and handler share one transaction; `lease`: lease mode; `plain`: optional key missing. */
  readonly mode: 'transaction' | 'lease' | 'plain';
  readonly tenant: string;
  /** The parsed key (`"abc"` and `abc` are both `abc`); null without one. */
  readonly key: string | null;
  /** `METHOD route key`, as the claim statement built it. */
  readonly scopedKey: string | null;
  /** The fencing token (int8, as the string node-postgres returns). */
  readonly fence: string | null;
  readonly attempt: number | null;
  /** What an earlier attempt saved with checkpoint() (lease mode). */
  readonly checkpointPhase: string | null;
  readonly checkpointData: unknown;
  /** The transaction's client: at once in transaction mode; in lease mode once begin() ran. */
  readonly client: PoolClient | null;
  /** The transaction to write in; in lease mode opens the completion transaction under the fence. */
  begin(): Promise<PoolClient>;
  /** Alias of begin(). */
  transaction(): Promise<PoolClient>;
  /** The same UUID on every attempt: the idempotency key of an external call. */
  downstreamKey(step: string): Promise<string>;
  /** Lease mode: save progress, in a short transaction of its own, under the fence. */
  checkpoint(phase: string, data?: unknown): Promise<void>;
  /** Lease mode: extend the lease (default: the route's); returns the new lease_expires_at. */
  heartbeat(lease?: string): Promise<Date | null>;
}

type Next = (err?: unknown) => void;
type ExpressLikeRequest = IncomingMessage & { idem?: IdemContext; rawBody?: Buffer; body?: unknown };

/** Express 5 route middleware: `app.post('/payments', idempotency({ pool }), handler)`. */
export function idempotency(options: IdempotencyOptions): (req: any, res: ServerResponse, next: Next) => Promise<void>;
/** Express error middleware to mount after the routes: an exception rolls back whatever its status. */
export function idempotencyErrors(): (err: unknown, req: any, res: ServerResponse, next: Next) => void;

/** Per-route config of the Fastify plugin: `{ config: { idempotency: true | {...} } }`. */
export type RouteIdempotency = true | Partial<Omit<IdempotencyOptions, 'pool'>>;

/** Fastify 5 plugin: `await app.register(pgIdemHttp, { pool })`. */
export function pgIdemHttp(instance: any, options: IdempotencyOptions, done: (err?: Error) => void): void;

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      idem?: IdemContext;
      rawBody?: Buffer;
    }
  }
}

export interface ResolvedOptions extends Required<Omit<IdempotencyOptions, 'method' | 'route' | 'tenant'>> {
  method?: string;
  route?: string;
  tenant?: IdempotencyOptions['tenant'];
}
export function resolveOptions(options: IdempotencyOptions): ResolvedOptions;

/** Framework-neutral: claim; either a response to send now or an attempt whose handler runs. */
export function start(
  options: ResolvedOptions,
  input: { method: string; route: string; keyHeader: string | string[] | undefined; tenant?: string | null; body: Buffer },
): Promise<{ response: CapturedResponse; attempt?: undefined } | { response?: undefined; attempt: Attempt }>;

export class Attempt {
  readonly ctx: IdemContext;
  readonly settled: boolean;
  /** The response to send (after COMMIT for a stored one); exception: the handler threw. */
  settle(response: CapturedResponse, exception?: unknown): Promise<CapturedResponse>;
  abandon(): Promise<void>;
}

// The pure contract (clients/contract.json).
export const contract: {
  contract_version: number;
  defaults: {
    key_header: string;
    replay_header: string;
    replay_header_value: string;
    stored_headers: string[];
    tenant: string;
    max_key_length: number;
    retry_after_seconds: number;
    statement_timeout_ms: number;
    idle_in_transaction_timeout_ms: number;
    final_status: { from: number; to: number; except: number[] };
  };
  errors: Record<string, { status: number; message: string | null; retry_after?: boolean }>;
  sqlstates: Array<[string, string]>;
  sql: Record<string, string>;
  vectors: Record<string, unknown[]>;
  reference_app: Record<string, string | number>;
  [more: string]: unknown;
};
export type ErrorName =
  | 'key_missing' | 'key_invalid' | 'stale_key' | 'in_progress' | 'lease_lost'
  | 'mismatch' | 'invalid_request' | 'forbidden' | 'unavailable' | 'internal_error';
export interface Envelope {
  http: 1;
  headers: Record<string, string>;
  body?: string;
  body_base64?: string;
}
/** The key of a header value: undefined when absent, null when invalid (400 key_invalid). */
export function parseKey(header: string | string[] | undefined): string | null | undefined;
export function isFinalStatus(status: number): boolean;
export function buildEnvelope(
  headers: Array<[string, unknown]> | Record<string, unknown>,
  body: Buffer | Uint8Array | string | null | undefined,
  storedHeaders?: string[],
): Envelope;
export function replayResponse(responseCode: number | null, responseBody: string | null, replayHeader?: string): CapturedResponse;
export function errorBody(name: ErrorName, message?: string | null): Buffer;
export function errorResponse(name: ErrorName, options?: { message?: string; retryAfter?: number }): CapturedResponse;
export function errorNameForSqlstate(sqlstate: string | null | undefined): ErrorName;
export function sqlstateOf(err: unknown): string | null;
export function claimSql(fields?: string[] | null): string;
export function routeTemplate(path: string): string;
