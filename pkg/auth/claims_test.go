package auth_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/auth"
)

// TestOwns: a resource is the token's only when both its owner and its
// organization are the token's.
func TestOwns(t *testing.T) {
	user, org := uuid.New(), uuid.New()
	c := auth.Claims{UserID: user, OrganizationID: org}
	if !c.Owns(user, org) {
		t.Fatal("the token's user in the token's organization: owned")
	}
	if c.Owns(user, uuid.New()) {
		t.Fatal("the token's user in another organization: not owned")
	}
	if c.Owns(uuid.New(), org) {
		t.Fatal("another user in the token's organization: not owned")
	}
}
