package browsertest_test

import (
	"testing"

	"github.com/chatd/chatd/pkg/db/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }
