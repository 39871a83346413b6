// Command api runs chatd's api service. Its settings come from CHATD_*
// environment variables and flags; run it with --help to list them.
package main

import (
	"os"

	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/services/api/apiserver"
)

func main() {
	os.Exit(service.Main(apiserver.Program(), os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}
