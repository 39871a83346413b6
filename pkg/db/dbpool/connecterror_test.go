package dbpool_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/localport"
)

func TestDescribeConnectErrorSaysWhereAndWhy(t *testing.T) {
	p, release, err := localport.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	release() // nothing listens on it now
	port := strconv.Itoa(p)
	_, err = pgx.Connect(context.Background(), "postgres://alice@127.0.0.1:"+port+"/ledger?connect_timeout=2")
	if err == nil {
		t.Fatal("connected to a port nothing listens on")
	}
	got, ok := dbpool.DescribeConnectError(err)
	if !ok {
		t.Fatalf("a refused connection is not described as a connect failure: %v", err)
	}
	for _, want := range []string{`database "ledger"`, `user "alice"`, "127.0.0.1:" + port, "connection refused"} {
		if !strings.Contains(got, want) {
			t.Errorf("description %q does not say %q", got, want)
		}
	}
	if strings.Contains(got, "\n") || strings.Contains(got, "dial error") {
		t.Errorf("description %q carries pgx's own report", got)
	}
	if _, ok := dbpool.DescribeConnectError(context.Canceled); ok {
		t.Error("a cancelled context was described as a connect failure")
	}
}
