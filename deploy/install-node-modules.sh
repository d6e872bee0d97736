#!/usr/bin/env bash
# Installs the npm packages of the gateway's real-client ctests (the
# versions tests/gateway/node/package.json pins: ioredis for Redis, memcached
# for memcached) into tests/gateway/node/node_modules, which git ignores.
# deploy/install-deps.sh runs it after the Debian packages (nodejs, npm).
# Idempotent: nothing is fetched when every package is there at its pinned
# version.
set -euo pipefail

dir="$(cd "$(dirname "$0")/.." && pwd)/tests/gateway/node"
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "install-node-modules: node or npm is not installed (Debian: nodejs npm; deploy/install-deps.sh)" >&2
  exit 1
fi
cd "${dir}"
# Every dependency present at its pinned version?
if node -e '
  const deps = require("./package.json").dependencies;
  for (const [name, version] of Object.entries(deps)) {
    if (require(`./node_modules/${name}/package.json`).version !== version) process.exit(1);
  }' 2>/dev/null; then
  echo "install-node-modules: the packages of ${dir}/package.json are present"
  exit 0
fi
echo "install-node-modules: npm install in ${dir}"
npm install --no-audit --no-fund --no-save --loglevel=error
