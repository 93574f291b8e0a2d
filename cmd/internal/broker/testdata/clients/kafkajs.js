// Produce records to, or consume them from, the embedded broker over SASL
// with KafkaJS.
//
// Run by cmd/internal/broker/foreign_test.go as `node kafkajs.js` (produce)
// or `node kafkajs.js consume N`, with the connection in the environment:
// BOOTSTRAP (host:port), MECHANISM (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512),
// SASL_USER, SASL_PASSWORD, CA (a PEM file to trust: TLS; empty:
// plaintext), TOPIC. To produce, the records' values are on stdin, one a
// line; it prints "produced N". To consume, it reads the topic from the
// beginning until N records arrived (or 20 s passed) and prints each
// record's value, one a line. It exits 0, or prints the error on stderr and
// exits 1.
'use strict'
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

function connect (env) {
  return new Kafka({
    clientId: 'workrouter-test',
    brokers: [env.BOOTSTRAP],
    ssl: env.CA ? { ca: [fs.readFileSync(env.CA, 'utf8')] } : false,
    sasl: { mechanism: env.MECHANISM.toLowerCase(), username: env.SASL_USER, password: env.SASL_PASSWORD },
    connectionTimeout: 5000,
    authenticationTimeout: 5000,
    retry: { retries: 2 },
    logLevel: logLevel.NOTHING
  })
}

async function consume (env, n) {
  const consumer = connect(env).consumer({ groupId: 'workrouter-test-kafkajs-' + process.pid, retry: { retries: 0 } })
  const got = []
  await consumer.connect()
  try {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('read ' + got.length + ' of ' + n + ' records in 20 s')), 20000)
      consumer.on(consumer.events.CRASH, (e) => { clearTimeout(timer); reject(e.payload.error) })
      consumer.subscribe({ topic: env.TOPIC, fromBeginning: true })
        .then(() => consumer.run({
          autoCommit: false,
          eachMessage: async ({ message }) => {
            got.push(message.value.toString())
            if (got.length >= n) { clearTimeout(timer); resolve() }
          }
        }))
        .catch(reject)
    })
  } finally {
    await consumer.disconnect()
  }
  for (const v of got) console.log(v)
}

async function main () {
  const env = process.env
  if (process.argv[2] === 'consume') return consume(env, Number(process.argv[3]))
  const values = fs.readFileSync(0, 'utf8').split('\n').filter((v) => v.trim() !== '')
  const producer = connect(env).producer({ idempotent: true })
  await producer.connect()
  try {
    await producer.send({ topic: env.TOPIC, messages: values.map((v) => ({ key: v, value: v })) })
  } finally {
    await producer.disconnect()
  }
  console.log('produced ' + values.length)
}

main().catch((e) => {
  console.error('error: ' + e.name + ': ' + e.message)
  process.exit(1)
})
