/** The page's element with this id (the HTML and the script ship together: a missing one is a bug). */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} is missing from the page`);
  return el as T;
}

/** A form's named control. */
export function field<T extends HTMLInputElement | HTMLSelectElement = HTMLInputElement>(form: HTMLFormElement, name: string): T {
  const el = form.elements.namedItem(name);
  if (!el) throw new Error(`The form has no control named ${name}`);
  return el as T;
}

/** The message of an error (thrown, or a GraphQL error object), or what was thrown. */
export function messageOf(e: unknown): string {
  return e && typeof e === 'object' && 'message' in e && e.message ? String(e.message) : String(e);
}
