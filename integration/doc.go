// Package integration runs workrouter against real brokers: Apache Kafka
// (KRaft) and Redpanda in containers that testcontainers-go starts, or the
// cluster named by WORKROUTER_TEST_BROKERS. It covers the consumer's
// end-to-end and zombie scenarios (both group protocols where the broker
// serves them), the demo and a short chaos profile, through the public
// library and the workrouter binary.
//
// It is a module of its own, so that Docker's dependency tree stays out of
// the library's go.mod; it has no code but its tests. Without a healthy
// Docker engine (and without WORKROUTER_TEST_BROKERS) every test skips
// with one line that says so.
//
//	cd integration && go test ./...                                  # containers (Docker)
//	WORKROUTER_TEST_BROKERS=127.0.0.1:9092 go test ./integration/... # an existing cluster
package integration
