package admin_test

import (
	"errors"
	"testing"

	"github.com/workrouter/workrouter/admin"
)

// TestStatusErrorsMatch: Status's errors for a topic and a group that do
// not exist match their sentinels.
func TestStatusErrorsMatch(t *testing.T) {
	e := newEnv(t)
	if _, err := admin.Status(e.ctx, e.cl, admin.StatusRequest{Group: group, Topic: "no-such-topic"}); !errors.Is(err, admin.ErrTopicMissing) {
		t.Fatalf("Status of a missing topic: %v, want ErrTopicMissing", err)
	}
	_, err := admin.Status(e.ctx, e.cl, admin.StatusRequest{Group: "no-such-group", Topic: topic})
	if !errors.Is(err, admin.ErrGroupNotFound) || errors.Is(err, admin.ErrTopicMissing) {
		t.Fatalf("Status of a missing group: %v, want ErrGroupNotFound", err)
	}
}
