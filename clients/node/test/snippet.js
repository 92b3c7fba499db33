'use strict';
// Runs a README snippet as its reader would: written to FILE in a directory, started with node
// (DATABASE_URL, PORT set), waited for until it listens. Used by the Knex recipe's test.
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const { spawn } = require('node:child_process');

/** The code of the README block marked `<!-- KIND: NAME FILE -->`: {file, code}. */
function readmeBlock(readme, kind, name) {
  const mark = new RegExp(`<!-- ${kind}: ${name} (\\S+) -->\\n\`\`\`js\\n([\\s\\S]*?)\`\`\``);
  const m = mark.exec(fs.readFileSync(readme, 'utf8'));
  if (!m) throw new Error(`no block <!-- ${kind}: ${name} ... --> in ${readme}`);
  return { file: m[1], code: m[2] };
}

const freePort = () =>
  new Promise((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });

const listening = (port) =>
  new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.end(() => resolve(true)));
    socket.on('error', () => resolve(false));
  });

/** Starts {file, code} in dir; resolves to {port, output(), stop()} once it listens. */
async function startSnippet(dir, { file, code }, env = {}) {
  fs.writeFileSync(path.join(dir, file), code);
  const port = await freePort();
  const child = spawn(process.execPath, [file], { cwd: dir, env: { ...process.env, ...env, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill();
    await new Promise((resolve) => child.once('exit', resolve));
  };
  for (let i = 0; i < 150; i += 1) {
    if (child.exitCode !== null) throw new Error(`${file} exited: ${output}`);
    if (await listening(port)) return { port, output: () => output, stop };
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await stop();
  throw new Error(`${file} did not listen: ${output}`);
}

module.exports = { readmeBlock, startSnippet };
