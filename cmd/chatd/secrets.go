package main

import (
	"context"
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
	subcommand
	// needsDB: the action reads or writes the database.
	needsDB bool
	run     func(ctx context.Context, r secretsRun) error
}

var secretsActions = []secretsAction{
	{subcommand{"status", "Count the rows of stored credentials under each key; plaintext rows are flagged."}, true, secretsStatus},
	{subcommand{"rotate", "Encrypt every stored credential under the first key (plaintext ones and those under older keys), in batches; safe while services run, and run again to resume."}, true, secretsRotate},
	{subcommand{"decrypt", "Store every credential as plaintext again, to stop encrypting (then unset " + secrets.EnvKeys + " everywhere)."}, true, secretsDecrypt},
	{subcommand{"generate-key", "Print a new random key for " + secrets.EnvKeys + "."}, false, func(_ context.Context, r secretsRun) error {
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
	c := &dbCommand[secretsAction]{
		name:     "secrets",
		synopsis: "[--database-url URL] [--keys KEYS] [--batch-size N] <action>",
		actions:  secretsActions,
		width:    13,
		footer: "The database comes from --database-url, else from " + envDatabaseURL +
			"; the keys from --keys, else from " + secrets.EnvKeys + ":\n" +
			"base64 keys of 32 bytes separated by commas, the first encrypts and every one decrypts, or a file holding them one a line.",
	}
	c.init(e)
	keysFlag := c.flags.String("keys", "", "Keys, or a file of them (default: $"+secrets.EnvKeys+").")
	batch := c.flags.Int("batch-size", secrets.DefaultBatchSize, "Rows read and rewritten at a time.")
	action, code, ok := c.parse(args)
	if !ok {
		return code
	}
	if *batch < 1 {
		return c.fail("--batch-size must be at least 1.")
	}
	r := secretsRun{batch: *batch, stdout: e.stdout, stderr: e.stderr}
	if action.needsDB {
		if r.dsn, ok = c.database(); !ok {
			return exitUsage
		}
		raw := *keysFlag
		if raw == "" {
			raw = e.getenv(secrets.EnvKeys)
		}
		var err error
		if r.keys, err = secrets.ParseKeys(raw); err != nil {
			return c.fail("%s: %s.", secrets.EnvKeys, err)
		}
	}
	return c.result(action, action.run(ctx, r))
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
