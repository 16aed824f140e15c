// Printed by `npm ci` (prepare): which Node runs the project's scripts. The npm package `node` puts Node 24
// into node_modules/.bin, which npm scripts find first on PATH, so `npm start` and `npm test` run on it even
// where the machine's own Node (the one npm itself runs on) is older.
import { execFileSync } from 'node:child_process';

const npmNodePath = process.env.npm_node_execpath;
const npmNode =
  npmNodePath && npmNodePath !== process.execPath ? execFileSync(npmNodePath, ['-v'], { encoding: 'utf8' }).trim() : undefined;
console.log(
  `runtime: Node ${process.version} (${process.execPath})${npmNode ? `; npm itself runs on Node ${npmNode} (${npmNodePath})` : ''}`,
);
if (npmNode && Number(npmNode.slice(1).split('.')[0]) < 24) {
  console.log(
    `  npm compares each package's "engines" with its own Node: an EBADENGINE warning above is about the installer, not the runtime`,
  );
}
if (Number(process.versions.node.split('.')[0]) < 24) {
  console.warn(
    "warning: this project runs on Node 24 (package.json's engines); the npm package `node` did not install, so scripts run on the machine's Node",
  );
}
