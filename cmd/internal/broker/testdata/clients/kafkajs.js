// Produce records to the embedded broker over SASL with KafkaJS.
//
// Run by cmd/internal/broker/foreign_test.go as `node kafkajs.js`, with the
// connection in the environment: BOOTSTRAP (host:port), MECHANISM (PLAIN,
// SCRAM-SHA-256 or SCRAM-SHA-512), SASL_USER, SASL_PASSWORD, CA (a PEM file
// to trust: TLS; empty: plaintext), TOPIC, and the records' values, one a
// line, on stdin. It prints "produced N" and exits 0, or prints the error
// on stderr and exits 1.
'use strict'
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

async function main () {
  const env = process.env
  const values = fs.readFileSync(0, 'utf8').split('\n').filter((v) => v.trim() !== '')
  const kafka = new Kafka({
    clientId: 'workrouter-test',
    brokers: [env.BOOTSTRAP],
    ssl: env.CA ? { ca: [fs.readFileSync(env.CA, 'utf8')] } : false,
    sasl: { mechanism: env.MECHANISM.toLowerCase(), username: env.SASL_USER, password: env.SASL_PASSWORD },
    connectionTimeout: 5000,
    authenticationTimeout: 5000,
    retry: { retries: 2 },
    logLevel: logLevel.NOTHING
  })
  const producer = kafka.producer({ idempotent: true })
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
