// Starts dynalite (in memory) on 127.0.0.1 and prints its port on stdout. It exits when its
// stdin closes, so a test process that spawned it never leaves it running behind.
//   node scripts/dynalite.js [port]
const path = require('path');
const dynalite = require(path.join(__dirname, '..', 'node_modules', 'dynalite'));

const port = Number(process.argv[2] || 0);
const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`${server.address().port}\n`);
});
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
