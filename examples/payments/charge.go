package payments

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/fencehttp"
)

// Charge is the worker's handler: it asks the service at url to charge the
// command's payload, with the tenure's token and the command's idempotency
// key. client's Transport is a *fencehttp.Transport.
func Charge[Tx any](client *http.Client, url string) consumer.Handler[Tx] {
	return func(ctx context.Context, _ Tx, cmd consumer.Command) error {
		ctx = fencehttp.WithFence(ctx, fencehttp.CommandFence(cmd)) // the same key on every retry
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charges", bytes.NewReader(cmd.Payload))
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := fencehttp.CheckResponse(resp); err != nil {
			return err // a *FencedError matches sink.ErrFenced: the partition stops
		}
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("%w: %s", ErrNotCharged, resp.Status)
		}
		return nil
	}
}
