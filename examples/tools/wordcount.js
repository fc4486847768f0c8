#!/usr/bin/env node
// skein example tool: wordcount.
// Reads one JSON object of arguments on stdin and prints one JSON object on stdout.
'use strict';

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  let args;
  try {
    args = JSON.parse(input);
  } catch (e) {
    process.stdout.write(JSON.stringify({ ok: false, error: `arguments are not JSON: ${e.message}` }) + '\n');
    process.exitCode = 2;
    return;
  }
  const text = args.text;
  const top = args.top === undefined ? 3 : args.top;
  const words = text.toLowerCase().match(/[\p{L}\p{N}']+/gu) || [];
  const freq = new Map();
  for (const w of words) freq.set(w, (freq.get(w) || 0) + 1);
  const frequent = [...freq.entries()]
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
    .slice(0, top)
    .map(([word, count]) => ({ word, count }));
  const lines = text === '' ? 0 : text.split('\n').length;
  const result = { words: words.length, lines, chars: [...text].length, top: frequent };
  process.stdout.write(JSON.stringify({ ok: true, result }) + '\n');
});
