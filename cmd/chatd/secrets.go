package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/pkg/db/dbpool"
	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/secrets"
)

// secretsRun is what a secrets action is given.
type secretsRun struct {
	dsn    string
	keys   *secrets.Keyring
	batch  int
	stdout io.Writer
	stderr io.Writer
}

// secretsAction is one secrets subcommand.
type secretsAction struct {
	name    string
	summary string
	// needsDB: the action reads or writes the database.
	needsDB bool
	run     func(ctx context.Context, r secretsRun) error
}

var secretsActions = []secretsAction{
	{"status", "Count the rows of stored credentials under each key; plaintext rows are flagged.", true, secretsStatus},
	{"rotate", "Encrypt every stored credential under the first key (plaintext ones and those under older keys), in batches; safe while services run, and run again to resume.", true, secretsRotate},
	{"decrypt", "Store every credential as plaintext again, to stop encrypting (then unset " + secrets.EnvKeys + " everywhere).", true, secretsDecrypt},
	{"generate-key", "Print a new random key for " + secrets.EnvKeys + ".", false, func(_ context.Context, r secretsRun) error {
		k, err := secrets.GenerateKey()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(r.stdout, k)
		return err
	}},
}

// secretsCommand manages the encryption of stored credentials.
func secretsCommand() *command {
	return &command{
		name:    "secrets",
		summary: "Encrypt, rotate, decrypt and count stored credentials.",
		run:     runSecrets,
	}
}

func runSecrets(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("chatd secrets", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dsn := fs.String("database-url", "", "Postgres connection string (default: $"+envDatabaseURL+").")
	keysFlag := fs.String("keys", "", "Keys, or a file of them (default: $"+secrets.EnvKeys+").")
	batch := fs.Int("batch-size", secrets.DefaultBatchSize, "Rows read and rewritten at a time.")
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: chatd secrets [--database-url URL] [--keys KEYS] [--batch-size N] <action>\n\nActions:\n")
		for _, a := range secretsActions {
			fmt.Fprintf(w, "  %-13s %s\n", a.name, a.summary)
		}
		fmt.Fprintf(w, "\nThe database comes from --database-url, else from %s; the keys from --keys, else from %s:\n"+
			"base64 keys of 32 bytes separated by commas, the first encrypts and every one decrypts, or a file holding them one a line.\n",
			envDatabaseURL, secrets.EnvKeys)
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(e.stderr, "chatd secrets: "+format+"\n", a...)
		usage(e.stderr)
		return exitUsage
	}
	positional, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		usage(e.stdout)
		return exitOK
	}
	if err != nil {
		return fail("%s.", err)
	}
	if len(positional) != 1 {
		if len(positional) == 0 {
			return fail("missing action.")
		}
		return fail("unexpected argument %q.", positional[1])
	}
	i := slices.IndexFunc(secretsActions, func(a secretsAction) bool { return a.name == positional[0] })
	if i < 0 {
		return fail("unknown action %q.", positional[0])
	}
	action := secretsActions[i]
	if *batch < 1 {
		return fail("--batch-size must be at least 1.")
	}
	r := secretsRun{dsn: *dsn, batch: *batch, stdout: e.stdout, stderr: e.stderr}
	if action.needsDB {
		if r.dsn == "" {
			r.dsn = e.getenv(envDatabaseURL)
		}
		if r.dsn == "" {
			return fail("no database: set %s or pass --database-url.", envDatabaseURL)
		}
		raw := *keysFlag
		if raw == "" {
			raw = e.getenv(secrets.EnvKeys)
		}
		if r.keys, err = secrets.ParseKeys(raw); err != nil {
			return fail("%s: %s.", secrets.EnvKeys, err)
		}
	}
	if err := action.run(ctx, r); err != nil {
		fmt.Fprintf(e.stderr, "chatd secrets %s: %v\n", action.name, err)
		return exitFailed
	}
	return exitOK
}

// withPool runs fn with a small pool on the database.
func (r secretsRun) withPool(ctx context.Context, fn func(pool *pgxpool.Pool) error) error {
	pool, err := dbpool.New(ctx, r.dsn, dbpool.Settings{}, dbpool.Options{MaxConns: 2, ApplicationName: "chatd-secrets"})
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(pool)
}

// secretsStatus prints rows per key and table, plaintext flagged, and
// whether the keys given hold each key.
func secretsStatus(ctx context.Context, r secretsRun) error {
	return r.withPool(ctx, func(pool *pgxpool.Pool) error {
		usage, err := secrets.KeyUsage(ctx, queries.New(pool))
		if err != nil {
			return err
		}
		type counts struct{ providers, mcp int64 }
		byKey := map[string]*counts{}
		var order []string
		for _, u := range usage {
			c := byKey[u.Digest]
			if c == nil {
				c = &counts{}
				byKey[u.Digest] = c
				order = append(order, u.Digest)
			}
			switch u.Table {
			case "chat_providers":
				c.providers += u.Rows
			default:
				c.mcp += u.Rows
			}
		}
		for _, d := range r.keys.Digests() {
			if byKey[d] == nil {
				byKey[d] = &counts{}
				order = append(order, d)
			}
		}
		slices.Sort(order)
		w := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "KEY\tPROVIDERS\tMCP SERVERS\tSTATE")
		var plain, missing int64
		for _, d := range order {
			c := byKey[d]
			rows := c.providers + c.mcp
			name, state := d, ""
			switch {
			case d == "":
				name, state = "plaintext", "not encrypted: run chatd secrets rotate"
				plain += rows
			case !r.keys.Has(d):
				state = "NOT HELD by these keys"
				missing += rows
			case d == r.keys.Primary():
				state = "held, encrypts"
			case rows > 0:
				state = "held, decrypts only: run chatd secrets rotate"
			default:
				state = "held, no rows: may be removed"
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", name, c.providers, c.mcp, state)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if plain > 0 {
			fmt.Fprintf(r.stdout, "%d rows hold plaintext credentials.\n", plain)
		}
		if missing > 0 {
			return fmt.Errorf("%d rows are encrypted under keys %s does not hold", missing, secrets.EnvKeys)
		}
		return nil
	})
}

// secretsRotate re-encrypts every stored credential under the first key.
func secretsRotate(ctx context.Context, r secretsRun) error {
	if !r.keys.Enabled() {
		return fmt.Errorf("no key: set %s (or pass --keys) with the new key first", secrets.EnvKeys)
	}
	return r.withPool(ctx, func(pool *pgxpool.Pool) error {
		res, err := secrets.Rotate(ctx, pool, r.keys, secrets.Options{BatchSize: r.batch, Progress: r.progress})
		if err != nil {
			return err
		}
		fmt.Fprintf(r.stdout, "Encrypted %d rows under key %s; %d already were.\n", res.Changed, r.keys.Primary(), res.Current)
		if res.Raced > 0 {
			fmt.Fprintf(r.stdout, "%d rows changed meanwhile and were left: run chatd secrets rotate again.\n", res.Raced)
		}
		return res.Err()
	})
}

// secretsDecrypt stores every credential as plaintext again.
func secretsDecrypt(ctx context.Context, r secretsRun) error {
	return r.withPool(ctx, func(pool *pgxpool.Pool) error {
		res, err := secrets.Decrypt(ctx, pool, r.keys, secrets.Options{BatchSize: r.batch, Progress: r.progress})
		if err != nil {
			return err
		}
		fmt.Fprintf(r.stdout, "Decrypted %d rows; %d already were plaintext.\n", res.Changed, res.Current)
		if res.Raced > 0 {
			fmt.Fprintf(r.stdout, "%d rows changed meanwhile and were left: run chatd secrets decrypt again.\n", res.Raced)
		}
		return res.Err()
	})
}

// progress reports a finished batch on stderr.
func (r secretsRun) progress(table string, res secrets.Result) {
	fmt.Fprintf(r.stderr, "%s: %d rewritten, %d current, %d changed meanwhile, %d failed so far\n", table, res.Changed, res.Current, res.Raced, res.Failed)
}
