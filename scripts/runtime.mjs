// Printed by `npm ci` (prepare): which Node runs the project's scripts. The npm package `node` puts Node 24
// into node_modules/.bin, which npm scripts find first on PATH, so `npm start` and `npm test` run on it even
// where the machine's own Node (the one npm itself runs on) is older.
const npmNode = /\bnode\/(v\S+)/.exec(process.env.npm_config_user_agent ?? '')?.[1];
console.log(
  `runtime: Node ${process.version} (${process.execPath})${npmNode && npmNode !== process.version ? `; npm itself ran on Node ${npmNode}` : ''}`,
);
if (npmNode && npmNode !== process.version) {
  console.log(
    `  npm compares each package's "engines" with its own Node (${npmNode}): an EBADENGINE warning above is about the installer, not the runtime`,
  );
}
if (Number(process.versions.node.split('.')[0]) < 24) {
  console.warn(
    'warning: this project runs on Node 24 (package.json "engines"); the npm package `node` did not install, so scripts run on the machine\'s Node',
  );
}
