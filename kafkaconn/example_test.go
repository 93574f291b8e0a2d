package kafkaconn_test

import (
	"fmt"
	"strings"

	"github.com/workrouter/workrouter/kafkaconn"
)

// A managed cluster's client.properties, read into a Config whose Opts go
// into router.Config.ClientOpts and consumer.Config.ClientOpts.
func ExampleConfig_ReadProperties() {
	props := `bootstrap.servers=broker-1.example.com:9093
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=billing
sasl.password=not-printed
`
	var conn kafkaconn.Config
	if err := conn.ReadProperties(strings.NewReader(props), "client.properties"); err != nil {
		fmt.Println(err)
		return
	}
	opts, err := conn.Opts()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(conn.Brokers, conn, len(opts))
	// Output: [broker-1.example.com:9093] TLS, SASL SCRAM-SHA-512 as billing 2
}
