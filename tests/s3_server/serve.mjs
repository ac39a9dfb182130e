// An S3-compatible server (s3rver) on 127.0.0.1 and a free port for strata's
// remote tests: creates BUCKET, uploads every file of FOLDER under PREFIX
// (anonymous PUTs, which s3rver allows), writes its port to PORT_FILE (by
// rename: the file appears whole), and serves until stdin closes. s3rver checks that a request's SigV4 Authorization
// header is well formed and names a known key (S3RVER), not the signature
// itself; tests/remote_test.cpp checks the signature against botocore.
//   node serve.mjs DATA_DIR FOLDER BUCKET PREFIX PORT_FILE
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import S3rver from 's3rver';

const [dataDir, folder, bucket, prefix, portFile] = process.argv.slice(2);
const server = new S3rver({
  port: 0,
  address: '127.0.0.1',
  silent: true,
  directory: dataDir,
  configureBuckets: [{ name: bucket }],
});
const { port } = await server.run();

function put(key, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, method: 'PUT', path: `/${bucket}/${key}`, headers: { 'Content-Length': body.length } },
      (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`PUT ${key}: ${res.statusCode}`))));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

for (const name of fs.readdirSync(folder)) {
  const file = path.join(folder, name);
  if (fs.statSync(file).isFile()) await put(`${prefix}/${name}`, fs.readFileSync(file));
}
fs.writeFileSync(`${portFile}.tmp`, `${port}\n`);
fs.renameSync(`${portFile}.tmp`, portFile);
process.stdin.resume();
process.stdin.on('end', async () => {
  await server.close();
  process.exit(0);
});
