#!/usr/bin/python3
"""Produce records to, or consume them from, the embedded broker over SASL
with a Python client.

Run by cmd/internal/broker/foreign_test.go:

    clients.py confluent|kafka-python
    clients.py confluent|kafka-python consume N

with the connection in the environment: BOOTSTRAP (host:port), MECHANISM
(PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), SASL_USER, SASL_PASSWORD, CA (a PEM
file to trust: TLS; empty: plaintext), TOPIC. To produce, the records'
values are on stdin, one a line; it prints "produced N". To consume, it
reads the topic from the beginning until N records arrived (or 20 s
passed) and prints each record's value, one a line. It exits 0, or prints
the error on stderr and exits 1.
"""
import os
import sys
import time


def conf():
    return {
        "bootstrap": os.environ["BOOTSTRAP"],
        "mechanism": os.environ["MECHANISM"],
        "user": os.environ["SASL_USER"],
        "password": os.environ["SASL_PASSWORD"],
        "ca": os.environ.get("CA", ""),
        "topic": os.environ["TOPIC"],
    }


def confluent(c, values):
    from confluent_kafka import KafkaError, Producer

    errors = []

    def on_error(err):
        errors.append(err)

    p = Producer({
        "bootstrap.servers": c["bootstrap"],
        "security.protocol": "SASL_SSL" if c["ca"] else "SASL_PLAINTEXT",
        "sasl.mechanisms": c["mechanism"],
        "sasl.username": c["user"],
        "sasl.password": c["password"],
        **({"ssl.ca.location": c["ca"]} if c["ca"] else {}),
        "partitioner": "murmur2_random",
        "enable.idempotence": True,
        "message.timeout.ms": 10000,
        "error_cb": on_error,
    })
    delivered = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg)

    for v in values:
        p.produce(c["topic"], key=v.encode(), value=v.encode(), on_delivery=on_delivery)
    # Poll until every record is delivered or failed; a refused login
    # surfaces as an _AUTHENTICATION error through error_cb.
    while len(delivered) + len([e for e in errors if e.code() != KafkaError._AUTHENTICATION]) < len(values):
        p.poll(0.1)
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        if auth:
            p.purge()
            raise RuntimeError("authentication failed: %s" % auth[0].str())
    if len(delivered) != len(values):
        raise RuntimeError("delivered %d of %d: %s" % (len(delivered), len(values), errors))
    return len(delivered)


def kafka_python(c, values):
    from kafka import KafkaProducer

    ssl = {"ssl_cafile": c["ca"], "ssl_check_hostname": True} if c["ca"] else {}
    p = KafkaProducer(
        bootstrap_servers=[c["bootstrap"]],
        security_protocol="SASL_SSL" if c["ca"] else "SASL_PLAINTEXT",
        sasl_mechanism=c["mechanism"],
        sasl_plain_username=c["user"],
        sasl_plain_password=c["password"],
        max_block_ms=10000,
        request_timeout_ms=10000,
        api_version_auto_timeout_ms=10000,
        **ssl,
    )
    futures = [p.send(c["topic"], key=v.encode(), value=v.encode()) for v in values]
    for f in futures:
        f.get(timeout=10)
    p.flush(timeout=10)
    p.close(timeout=10)
    return len(futures)


def security(c):
    return "SASL_SSL" if c["ca"] else "SASL_PLAINTEXT"


def confluent_consume(c, n):
    from confluent_kafka import Consumer

    cons = Consumer({
        "bootstrap.servers": c["bootstrap"],
        "security.protocol": security(c),
        "sasl.mechanisms": c["mechanism"],
        "sasl.username": c["user"],
        "sasl.password": c["password"],
        **({"ssl.ca.location": c["ca"]} if c["ca"] else {}),
        "group.id": "workrouter-test-confluent-%d" % os.getpid(),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    cons.subscribe([c["topic"]])
    got = []
    deadline = time.time() + 20
    try:
        while len(got) < n and time.time() < deadline:
            m = cons.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise RuntimeError(m.error().str())
            got.append(m.value().decode())
    finally:
        cons.close()
    return got


def kafka_python_consume(c, n):
    from kafka import KafkaConsumer

    ssl = {"ssl_cafile": c["ca"], "ssl_check_hostname": True} if c["ca"] else {}
    cons = KafkaConsumer(
        c["topic"],
        bootstrap_servers=[c["bootstrap"]],
        security_protocol=security(c),
        sasl_mechanism=c["mechanism"],
        sasl_plain_username=c["user"],
        sasl_plain_password=c["password"],
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        request_timeout_ms=10000,
        api_version_auto_timeout_ms=10000,
        **ssl,
    )
    got = []
    deadline = time.time() + 20
    try:
        while len(got) < n and time.time() < deadline:
            for recs in cons.poll(timeout_ms=500).values():
                got.extend(r.value.decode() for r in recs)
    finally:
        cons.close()
    return got


def main():
    which = sys.argv[1]
    c = conf()
    try:
        if sys.argv[2:3] == ["consume"]:
            n = int(sys.argv[3])
            got = {"confluent": confluent_consume, "kafka-python": kafka_python_consume}[which](c, n)
            for v in got:
                print(v)
            return
        values = [line.rstrip("\n") for line in sys.stdin if line.strip()]
        n = {"confluent": confluent, "kafka-python": kafka_python}[which](c, values)
    except Exception as e:  # every failure: one line, exit 1
        print("error: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(1)
    print("produced %d" % n)


if __name__ == "__main__":
    main()
