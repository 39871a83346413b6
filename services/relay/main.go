// Command relay runs chatd's relay service. Its settings come from CHATD_*
// environment variables and flags; run it with --help to list them.
package main

import (
	"os"

	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/services/relay/relayserver"
)

func main() {
	os.Exit(service.Main(relayserver.Program(), os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}
