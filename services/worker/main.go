// Command worker runs chatd's worker service. Its settings come from CHATD_*
// environment variables and flags; run it with --help to list them.
package main

import (
	"os"

	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/services/worker/workerserver"
)

func main() {
	os.Exit(service.Main(workerserver.Program(), os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}
