import type { InviteMethod } from '../../db/tables.js';

/** The placeholders an invitation template may use (D3 `portal.invitationSubject/Text/Html`). */
export const INVITATION_PLACEHOLDERS = ['displayName', 'email', 'subjectName', 'tenantName', 'inviteMethod', 'invitedTo'] as const;

export type InvitationValues = Record<(typeof INVITATION_PLACEHOLDERS)[number], string>;

/** A tenant's template; a part left null takes the bundled default. */
export interface InvitationTemplate {
  subject: string | null;
  text: string | null;
  html: string | null;
}

export const DEFAULT_INVITATION_SUBJECT = 'Your invitation to the {tenantName} portal';
export const DEFAULT_INVITATION_TEXT = [
  'Hello {displayName},',
  '',
  'You have been invited to the {tenantName} subject portal, with access to {invitedTo}.',
  '',
  'This invitation was sent to {email}. If you did not expect it, you can ignore this message.',
].join('\n');

const PLACEHOLDER = /\{(\w+)\}/g;

/** Placeholders in `template` that are not among INVITATION_PLACEHOLDERS (checked when a tenant file is applied). */
export function unknownPlaceholders(template: string): string[] {
  const known = new Set<string>(INVITATION_PLACEHOLDERS);
  return [...template.matchAll(PLACEHOLDER)].map((m) => m[1]!).filter((name) => !known.has(name));
}

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

// One pass: a value that itself holds "{email}" is not expanded again.
function fill(template: string, values: InvitationValues, encode: (s: string) => string): string {
  return template.replace(PLACEHOLDER, (whole, name: string) =>
    Object.hasOwn(values, name) ? encode(values[name as keyof InvitationValues]) : whole,
  );
}

/** Plain text as HTML: escaped, blank-line paragraphs, line breaks kept. */
function textAsHtml(text: string): string {
  const paragraphs = text.split(/\n\s*\n/).map((p) => `<p>${escapeHtml(p).replace(/\n/g, '<br>\n')}</p>`);
  return `<!DOCTYPE html>\n<html><body>\n${paragraphs.join('\n')}\n</body></html>\n`;
}

/** The values of one invitation; `subjectName` is the subject's display name (ExternalId when the field is empty, D3). */
export function invitationValues(v: {
  displayName: string;
  email: string;
  subjectName: string;
  tenantName: string;
  inviteMethod: InviteMethod;
}): InvitationValues {
  return { ...v, invitedTo: v.inviteMethod === 'SelfAccess' ? 'your own record' : `the record of ${v.subjectName}` };
}

/**
 * The invitation mail (D9): who is invited (`displayName`, `email`) to what (the tenant's portal, the
 * subject's record), from the tenant's template or the bundled one. Values are HTML-escaped in the HTML
 * part; without an HTML template the HTML part is the text part, escaped.
 */
export function renderInvitation(template: InvitationTemplate, values: InvitationValues): { subject: string; text: string; html: string } {
  const text = fill(template.text ?? DEFAULT_INVITATION_TEXT, values, (s) => s);
  return {
    // A header: no line breaks, whatever a value holds.
    subject: fill(template.subject ?? DEFAULT_INVITATION_SUBJECT, values, (s) => s)
      .replace(/[\r\n]+/g, ' ')
      .trim(),
    text,
    html: template.html !== null ? fill(template.html, values, escapeHtml) : textAsHtml(text),
  };
}
