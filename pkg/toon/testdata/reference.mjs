// Runs the reference TOON implementation (@toon-format/toon) for the Go
// tests and benchmarks in one process.
//
//   TOON_NODE_MODULES=<dir> node reference.mjs < requests.json > responses.json
//
// Input: a JSON array of requests
//   {"op":"encode","input":"<JSON text>","options":{...}}
//   {"op":"decode","input":"<TOON text>","options":{...}}
//   {"op":"bench","json":"<JSON text>","minMillis":N}
// Output: a JSON array with one response per request:
//   {"ok":true,"out":"<TOON text or JSON text>"} or {"ok":false,"error":"..."}
// For bench: {"ok":true,"encodeNs":..,"decodeNs":..,"stringifyNs":..,"parseNs":..}
// (nanoseconds per operation, the median of 5 rounds spanning minMillis).
import { createRequire } from 'node:module'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const dir = process.env.TOON_NODE_MODULES
if (!dir) {
  process.stderr.write('TOON_NODE_MODULES is not set\n')
  process.exit(2)
}
const require = createRequire(path.join(dir, 'resolver.cjs'))
const { encode, decode } = await import(pathToFileURL(require.resolve('@toon-format/toon')).href)

const chunks = []
for await (const chunk of process.stdin) chunks.push(chunk)
const requests = JSON.parse(Buffer.concat(chunks).toString('utf8'))

// Median over 5 rounds of at least minMillis/5 each, so one burst of
// machine load does not decide the figure.
function timeOp(fn, minMillis) {
  fn() // warm up
  const rounds = []
  const slice = BigInt(Math.max(1, Math.floor(minMillis / 5))) * 1000000n
  for (let round = 0; round < 5; round++) {
    let iterations = 0
    const start = process.hrtime.bigint()
    let now = start
    while (now - start < slice || iterations < 3) {
      fn()
      iterations++
      now = process.hrtime.bigint()
    }
    rounds.push(Number(now - start) / iterations)
  }
  rounds.sort((a, b) => a - b)
  return rounds[2]
}

const responses = requests.map((request) => {
  try {
    switch (request.op) {
      case 'encode':
        return { ok: true, out: encode(JSON.parse(request.input), request.options ?? {}) }
      case 'decode':
        return { ok: true, out: JSON.stringify(decode(request.input, request.options ?? {})) }
      case 'bench': {
        const value = JSON.parse(request.json)
        const toon = encode(value)
        const minMillis = request.minMillis ?? 500
        return {
          ok: true,
          encodeNs: timeOp(() => encode(value), minMillis),
          decodeNs: timeOp(() => decode(toon), minMillis),
          stringifyNs: timeOp(() => JSON.stringify(value), minMillis),
          parseNs: timeOp(() => JSON.parse(request.json), minMillis),
        }
      }
      default:
        return { ok: false, error: `unknown op ${request.op}` }
    }
  } catch (error) {
    return { ok: false, error: String(error?.message ?? error) }
  }
})
process.stdout.write(JSON.stringify(responses))
