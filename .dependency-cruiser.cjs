/**
 * The layer rules of docs/architecture.md, checked by `npm run lint` (dependency-cruiser).
 * Type-only imports count: a layer that needs a type from above needs a smaller interface of its own.
 */

// Plumbing, bottom up: each layer may import the ones before it, never a later one, a domain or the app.
const PLUMBING = ['core', 'db', 'graphql', 'http'];

// Domains, bottom up: a domain may import the ones before it only (tenant configuration below the
// entities that read it, user above the subjects and entities it grants access to, the tenant apply on top).
const DOMAINS = ['auth', 'custom-field', 'tenant', 'structural-entity', 'subject', 'user', 'data', 'portal', 'tenant-apply'];

const plumbingRules = PLUMBING.map((layer, i) => ({
  name: `${layer}-points-down`,
  comment: `src/${layer}/ is plumbing: it may import ${PLUMBING.slice(0, i).join(', ') || 'nothing of the service'} below it, never a domain or the app.`,
  severity: 'error',
  from: { path: `^src/${layer}/` },
  to: { path: `^src/(?:${[...PLUMBING.slice(i + 1), 'domains', 'app', 'cli', 'provider'].join('|')})/|^src/server\\.ts$` },
}));

const domainRules = DOMAINS.map((domain, i) => ({
  name: `domain-${domain}-points-down`,
  comment: `domains/${domain} may import ${DOMAINS.slice(0, i).join(', ') || 'no other domain'}; the order is in docs/architecture.md.`,
  severity: 'error',
  from: { path: `^src/domains/${domain}/` },
  to: { path: `^src/(?:domains/(?:${DOMAINS.slice(i + 1).join('|') || '$^'})/|app/|cli/|provider/|server\\.ts$)` },
}));

// The data domain's subsystems, bottom up (docs/data-cache.md): each may import the ones before it, never a
// later one or the domain's top-level files (its service, schema, routes and door).
const DATA_SUBSYSTEMS = ['model', 'provider', 'live', 'cache', 'aggregates'];

const dataRules = [
  ...DATA_SUBSYSTEMS.map((sub, i) => ({
    name: `data-${sub}-points-down`,
    comment: `domains/data/${sub}/ may import ${DATA_SUBSYSTEMS.slice(0, i).join(', ') || 'no other data subsystem'}; never the data domain's top-level files.`,
    severity: 'error',
    from: { path: `^src/domains/data/${sub}/` },
    to: { path: `^src/domains/data/(?:(?:${DATA_SUBSYSTEMS.slice(i + 1).join('|') || '$^'})/|[^/]+$)` },
  })),
  {
    name: 'data-subsystem-through-its-door',
    comment: 'A data subsystem is reached from outside it only through its index.ts; its other files are private.',
    severity: 'error',
    from: { path: '^src/domains/data/([^/]+)' },
    to: { path: '^src/domains/data/[^/]+/', pathNot: ['^src/domains/data/$1/', '^src/domains/data/[^/]+/index\\.ts$'] },
  },
];

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'No import circles, type-only imports included.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    ...plumbingRules,
    ...domainRules,
    ...dataRules,
    {
      name: 'domain-through-its-door',
      comment: 'Another domain is reached through its door, src/domains/<d>/index.ts; its other files are private.',
      severity: 'error',
      from: { path: '^src/domains/([^/]+)/' },
      to: { path: '^src/domains/[^/]+/', pathNot: ['^src/domains/$1/', '^src/domains/[^/]+/index\\.ts$'] },
    },
    {
      name: 'app-through-domain-doors',
      comment: 'The app and the entry points reach a domain through its door (src/domains/<d>/index.ts).',
      severity: 'error',
      from: { path: '^src/(?:app/|cli/|server\\.ts$)' },
      to: { path: '^src/domains/', pathNot: '^src/domains/[^/]+/index\\.ts$' },
    },
    {
      name: 'migrations-are-frozen',
      comment: 'A migration never imports application code: it must run the same way forever.',
      severity: 'error',
      from: { path: '^db/' },
      to: { path: '^src/' },
    },
    {
      name: 'app-not-imported',
      comment: 'src/app/ composes the service; only the entry points (server, cli) import it.',
      severity: 'error',
      from: { path: '^src/', pathNot: '^src/(?:app/|cli/|server\\.ts$)' },
      to: { path: '^src/app/' },
    },
    {
      name: 'reference-provider-stands-alone',
      comment: 'The reference provider is a separate program: it shares no code with the service.',
      severity: 'error',
      from: { path: '^src/provider/' },
      to: { path: '^src/', pathNot: '^src/provider/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
