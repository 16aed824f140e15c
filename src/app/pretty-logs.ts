import { isColorSupported, prettyFactory } from 'pino-pretty';
import type { Config } from '../core/config.js';

/** JSON lines for a log collector, or one short line per event for a person at a terminal. */
export type LogFormat = 'json' | 'pretty';

/** Where log lines go: standard output, or any stream taking text. */
export interface LogOutput {
  write(text: string): unknown;
  isTTY?: boolean;
}

/** LOG_FORMAT when set; else pretty on a terminal outside production, JSON everywhere else. */
export function logFormat(config: Pick<Config, 'LOG_FORMAT' | 'NODE_ENV'>, out: { isTTY?: boolean }): LogFormat {
  return config.LOG_FORMAT ?? (out.isTTY === true && config.NODE_ENV !== 'production' ? 'pretty' : 'json');
}

type Line = Record<string, unknown>;

/**
 * A pino destination writing each JSON line to `out` as one line of pino-pretty, shortened: an access-log
 * line becomes `GET /path 200 12ms`, a logged invitation mail its recipient, subject and link. In-process
 * (no transport worker), so the quick start stays one thread and a line is written when it is logged.
 */
export function prettyDestination(out: LogOutput): { write(line: string): void } {
  const prettify = prettyFactory({
    colorize: isColorSupported && out.isTTY === true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname',
    singleLine: true,
  });
  return { write: (line) => void out.write(prettify(shorten(JSON.parse(line) as Line))) };
}

function shorten(line: Line): Line {
  const { req, res, responseTime, ...rest } = line;
  // pino-http's line when a response finished (src/app/operations.ts), without who called: on every request
  // it would be noise. Other lines keep `tenant` and `client` (a WebSocket closed: who it was). Lines logged
  // during the request carry `req` alone and keep its method and path.
  if (isObject(req) && isObject(res)) {
    const { tenant: _tenant, client: _client, ...fields } = rest;
    const ms = typeof responseTime === 'number' ? ` ${Math.round(responseTime)}ms` : '';
    return { ...fields, msg: `${String(req['method'])} ${String(req['path'])} ${String(res['statusCode'])}${ms}` };
  }
  if (isObject(req)) return { ...rest, msg: `${String(line['msg'])} (${String(req['method'])} ${String(req['path'])})` };
  // An invitation mail logged instead of sent (SMTP_URL unset, src/domains/portal/outbox.sender.ts).
  if (typeof line['text'] === 'string' && 'to' in line && 'subject' in line) {
    // The first link, without the sentence's closing punctuation.
    const link = /\bhttps?:\/\/[^\s<>"]*[^\s<>".,;:!?)']/.exec(line['text'])?.[0];
    return {
      level: line['level'],
      time: line['time'],
      msg: `${String(line['msg'])}: to ${String(line['to'])}, "${String(line['subject'])}"${link ? `, ${link}` : ''}`,
    };
  }
  return line;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;
