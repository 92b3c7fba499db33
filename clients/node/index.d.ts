// Types of pg-idem-http. The frameworks' and pg's types are referenced structurally where the
// package does not need them, so using it does not force @types/express or fastify on anyone.
import type { Pool, PoolClient, QueryResult } from 'pg';
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
  /**
   * The tenant, from the application's auth. null, undefined or '' answers 400 tenant_missing.
   * Required unless singleTenant is given (not both).
   */
  tenant?: (req: any) => string | null | undefined | Promise<string | null | undefined>;
  /** The one tenant every caller shares, instead of a tenant hook. */
  singleTenant?: string;
  /** pg_idem's schema; default: found with the contract's locate statement. */
  schema?: string;
  /** Default `Idempotency-Key`. */
  keyHeader?: string;
  /** Default `Idempotent-Replayed`. */
  replayHeader?: string;
  /** Names of the headers stored with the response (never-stored ones throw). Default content-type, location, etag. */
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

/**
 * The claim's connection as a handler gets it: queries pass through; commit, rollback and
 * release throw (the package ends the transaction).
 */
export interface IdemHandle {
  query: PoolClient['query'];
  escapeIdentifier(text: string): string;
  escapeLiteral(text: string): string;
  commit(): never;
  rollback(): never;
  release(): never;
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
  /** The transaction's handle: at once in transaction mode; in lease mode once begin() ran. */
  readonly client: IdemHandle | null;
  /** The transaction to write in; in lease mode opens the completion transaction under the fence. */
  begin(): Promise<IdemHandle>;
  /** Alias of begin(). */
  transaction(): Promise<IdemHandle>;
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

export interface ResolvedOptions extends Required<Omit<IdempotencyOptions, 'method' | 'route' | 'tenant' | 'singleTenant' | 'schema'>> {
  method?: string;
  route?: string;
  schema: string | null;
  singleTenant: string | null;
  tenant: NonNullable<IdempotencyOptions['tenant']>;
}
export function resolveOptions(options: IdempotencyOptions): ResolvedOptions;

/** pg_idem's schema (quoted) and version, found once per pool; rejects with PgIdemSetupError. */
export interface Located {
  schema: string;
  version: string;
}
export function locate(pool: Pool, options?: { schema?: string | null }): Promise<Located>;

/** Framework-neutral: claim; either a response to send now or an attempt whose handler runs. */
export function start(
  options: ResolvedOptions,
  input: {
    method: string;
    route: string;
    target: string;
    keyHeader: string | string[] | undefined;
    tenant?: string | null;
    body: Buffer;
  },
): Promise<{ response: CapturedResponse; attempt?: undefined } | { response?: undefined; attempt: Attempt }>;

// Bring your own transaction.

/** Anything with node-postgres's query(text, values): a Client, a PoolClient, fromKnex(trx). */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] } | QueryResult<any>>;
}
/** pg_idem cannot be used from this database: do not start. */
export class PgIdemSetupError extends Error {}
/** complete() ran in another transaction than the claim's; `response` is the 500 to send. */
export class TransactionEndedError extends Error {
  readonly response: CapturedResponse;
}
export function locateOn(db: Queryable, options?: { schema?: string | null }): Promise<Located>;
export interface ClaimRequest {
  /** From locate / locateOn. */
  schema: string;
  tenant: string | null | undefined;
  method: string;
  /** The route template, `{name}` or `:name`. */
  route: string;
  /** The request target as received (path and query), normalised here. */
  target: string;
  /** The raw Idempotency-Key header value. */
  keyHeader: string | string[] | undefined;
  body: Buffer | Uint8Array | string | null | undefined;
  fields?: string[] | null;
  ttl?: string | null;
  statementTimeoutMs?: number;
  idleInTransactionTimeoutMs?: number;
  retryAfterSeconds?: number;
  replayHeader?: string;
}
export interface Claim {
  readonly schema: string;
  readonly tenant: string;
  readonly key: string;
  readonly method: string;
  readonly route: string;
  readonly scopedKey: string;
  readonly fence: string;
  readonly attempt: number;
  readonly txid: string | null;
  readonly checkpointPhase: string | null;
  readonly checkpointData: unknown;
}
export type ClaimResult =
  | { outcome: 'claimed'; claim: Claim; response?: undefined }
  | { outcome: 'replayed' | 'mismatch' | 'in_progress' | 'rejected'; response: CapturedResponse; claim?: undefined };
/** Claims the key in the caller's open transaction on db. */
export function claim(db: Queryable, request: ClaimRequest): Promise<ClaimResult>;
/** Stores a final response with the claim, before the caller's COMMIT. */
export function complete(
  db: Queryable,
  claim: Claim,
  response: { status: number; headers: Array<[string, unknown]> | Record<string, unknown>; body: Buffer | Uint8Array | string | null },
  options?: { storedHeaders?: string[] },
): Promise<void>;
/** Knex's transaction (pg driver) as a Queryable. */
export function fromKnex(trx: { raw(sql: string, bindings: unknown[]): any }): Queryable;

// Outcomes.
export type OutcomeName =
  | 'claimed' | 'replayed' | 'mismatch' | 'in_progress' | 'stored' | 'rolled_back'
  | 'lease_lost' | 'transaction_ended' | 'rejected' | 'database_error';
/** Every outcome name with its count since the process started. */
export function outcomeCounts(): Record<OutcomeName, number>;
/** The diagnostics_channel name every outcome is published on: 'pg-idem-http:outcome'. */
export const OUTCOME_CHANNEL: string;
/** What the channel publishes. */
export interface OutcomeMessage {
  outcome: OutcomeName;
  method?: string;
  route?: string;
  tenant?: string;
  key?: string;
  status?: number;
  error?: string;
}

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
    never_stored_headers: string[];
    max_key_length: number;
    max_body_bytes: number;
    retry_after_seconds: number;
    statement_timeout_ms: number;
    idle_in_transaction_timeout_ms: number;
    final_status: { from: number; to: number; except: number[] };
  };
  errors: Record<string, { status: number; message: string | null; retry_after?: boolean }>;
  sqlstates: Array<[string, string]>;
  sql: Record<string, string>;
  vectors: Record<string, unknown[]>;
  reference_app: Record<string, unknown>;
  min_pg_idem_version: string;
  outcomes: OutcomeName[];
  [more: string]: unknown;
};
export type ErrorName =
  | 'key_missing' | 'key_invalid' | 'tenant_missing' | 'payload_too_large' | 'stale_key' | 'in_progress'
  | 'lease_lost' | 'mismatch' | 'invalid_request' | 'forbidden' | 'unavailable' | 'internal_error';
export interface Envelope {
  http: 2;
  headers: Record<string, string[]>;
  body?: string;
  body_base64?: string;
}
/** The key of a header value: undefined when absent, null when invalid (400 key_invalid). */
export function parseKey(header: string | string[] | undefined): string | null | undefined;
export function isFinalStatus(status: number): boolean;
/** The request target as the fingerprint binds it (RFC 3986 6.2.2). */
export function normalizeTarget(received: string): string;
/** Whether an installed pg_idem version is at least the contract's minimum. */
export function versionOk(installed: string): boolean;
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
export function errorResponseFor(err: unknown, retryAfter?: number): CapturedResponse;
export function claimSql(fields?: string[] | null): string;
export function routeTemplate(path: string): string;
