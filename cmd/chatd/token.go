package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/cmd/internal/devstack"
	"github.com/chatd/chatd/pkg/auth"
)

// tokenCommand prints a bearer token signed with the HS256 secret.
func tokenCommand() *command {
	return &command{
		name:    "token",
		summary: "Print a bearer token for a user of an organization.",
		run:     runToken,
	}
}

func runToken(_ context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("chatd token", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sub := fs.String("sub", "", "The user's UUID (the token's sub claim; default: a new one).")
	org := fs.String("org", "", "The organization's UUID (the token's org claim; default: a new one).")
	admin := fs.Bool("admin", false, "Make the user a deployment admin (may manage providers and model configs).")
	scopeText := fs.String("scope", string(auth.ScopeAll), "What the token may do: all (the full API) or chat_model_config:read (model discovery only); several are space- or comma-separated.")
	ttlText := fs.String("ttl", "720h", "How long the token is valid: a Go duration such as 720h or 90m, or days such as 30d.")
	secret := fs.String("secret", "", "The HS256 secret, at least 32 bytes (default: $"+auth.EnvSecret+", else the dev stack's).")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: chatd token [--sub <user-uuid>] [--org <org-uuid>] [--admin] [--scope all] [--ttl 720h] [--secret S]\n\n")
		fmt.Fprintf(w, "Prints a bearer token (HS256) on standard output, for the header\n")
		fmt.Fprintf(w, "Authorization: Bearer <token>. The secret comes from --secret, else from %s,\n", auth.EnvSecret)
		fmt.Fprintf(w, "else from the dev stack's %s (in $CHATD_DEV_DATA_DIR, default .chatd).\n", devstack.IdentityFile)
		fmt.Fprintf(w, "Without --sub or --org the token is for a new user or organization.\n\nFlags:\n")
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(w, "  --%-7s %s\n", f.Name, f.Usage)
		})
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(e.stderr, "chatd token: "+format+"\n", a...)
		usage(e.stderr)
		return exitUsage
	}

	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		usage(e.stdout)
		return exitOK
	}
	if err != nil {
		return fail("%s.", err)
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q.", fs.Arg(0))
	}
	userID, err := uuidFlag("sub", *sub, "the user's UUID")
	if err != nil {
		return fail("%s.", err)
	}
	orgID, err := uuidFlag("org", *org, "the organization's UUID")
	if err != nil {
		return fail("%s.", err)
	}
	if *sub == "" {
		fmt.Fprintf(e.stderr, "chatd token: for a new user %s (--sub chooses one)\n", userID)
	}
	if *org == "" {
		fmt.Fprintf(e.stderr, "chatd token: in a new organization %s (--org chooses one)\n", orgID)
	}
	scopes, err := parseScopes(*scopeText)
	if err != nil {
		return fail("--scope %s.", err)
	}
	ttl, err := parseTTL(*ttlText)
	if err != nil {
		return fail("--ttl %s.", err)
	}
	if *secret == "" {
		*secret = e.getenv(auth.EnvSecret)
	}
	if *secret == "" {
		dataDir := firstNonEmpty(e.getenv("CHATD_DEV_DATA_DIR"), ".chatd")
		dev, err := devstack.ReadSecret(dataDir)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return fail("no secret: set %s, pass --secret, or run chatd dev (make dev) once in this checkout, which keeps one in %s.",
				auth.EnvSecret, filepath.Join(dataDir, devstack.IdentityFile))
		case err != nil:
			return fail("%s.", err)
		}
		*secret = dev
	}
	if err := auth.CheckSecret([]byte(*secret)); err != nil {
		return fail("%s.", err)
	}

	signer, err := auth.NewSigner([]byte(*secret))
	if err != nil {
		fmt.Fprintf(e.stderr, "chatd token: %v\n", err)
		return exitFailed
	}
	token, err := signer.Sign(auth.Claims{UserID: userID, OrganizationID: orgID, Admin: *admin, Scopes: scopes}, ttl)
	if err != nil {
		fmt.Fprintf(e.stderr, "chatd token: %v\n", err)
		return exitFailed
	}
	if _, err := fmt.Fprintln(e.stdout, token); err != nil {
		return exitFailed
	}
	return exitOK
}

// parseScopes reads --scope: scope names separated by blanks or commas.
// The full scope alone is written as no scope claim, the default every
// verifier reads as the full API.
func parseScopes(text string) ([]auth.Scope, error) {
	var out []auth.Scope
	for _, name := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' }) {
		s, err := auth.ParseScope(name)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q names no scope (know all, chat_model_config:read)", text)
	}
	if len(out) == 1 && out[0] == auth.ScopeAll {
		return nil, nil
	}
	return out, nil
}

// uuidFlag parses the value of --name, which must be a UUID other than the
// nil UUID, in the canonical 36-character form the server accepts; an
// empty value is a new UUID.
func uuidFlag(name, value, what string) (uuid.UUID, error) {
	if value == "" {
		return uuid.New(), nil
	}
	id, err := uuid.Parse(value)
	if err != nil || len(value) != 36 || id == uuid.Nil {
		return uuid.Nil, fmt.Errorf("--%s %q is not a UUID; it must be %s, such as %s", name, value, what, uuid.NewString())
	}
	return id, nil
}

// parseTTL reads a positive lifetime: a Go duration ("720h", "90m") or a
// whole number of days ("30d").
func parseTTL(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n > 100*365 {
			return 0, fmt.Errorf("%q is not a duration such as 720h, 90m or 30d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%q is not a duration such as 720h, 90m or 30d", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q is not positive", s)
	}
	return d, nil
}
