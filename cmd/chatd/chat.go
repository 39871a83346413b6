package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
)

// Environment variables of chatd chat (flags override them).
const (
	envChatURL       = "CHATD_URL"
	envChatStreamURL = "CHATD_STREAM_URL"
	envChatToken     = "CHATD_TOKEN"
)

// chatCommand talks to a running chatd over its REST facade and stream.
func chatCommand() *command {
	return &command{
		name:    "chat",
		summary: "Create, message, watch, list, interrupt and archive chats on a running chatd.",
		run:     runChat,
	}
}

// chatAction is one chatd chat subcommand.
type chatAction struct {
	name    string
	args    string // the usage line after "chatd chat <name>"
	summary string
	// flags adds the action's own flags to fs and returns the function
	// that runs it once fs is parsed.
	flags func(fs *flag.FlagSet) func(ctx context.Context, x *chatRun, args []string) int
}

// chatRun is what an action runs with: the parsed connection settings
// and output.
type chatRun struct {
	e      *env
	name   string // "chatd chat <action>", for messages
	client *chatClient
	usage  func(io.Writer)
}

func chatActions() []*chatAction {
	return []*chatAction{
		{name: "new", args: "[--model ID] [--title T] [--json] [text... | -]", summary: "Create a chat, optionally with a first message, and print its ID.", flags: chatNewFlags},
		{name: "send", args: "<chat> [--interrupt | --queue] [--json] <text... | ->", summary: "Send a message (queued behind a running turn unless --interrupt).", flags: chatSendFlags},
		{name: "watch", args: "<chat> [--cursor C] [--until-idle]", summary: "Stream the chat to the terminal as it is written.", flags: chatWatchFlags},
		{name: "history", args: "<chat> [--page-size N] [--json]", summary: "Print the chat's whole transcript, read a page at a time.", flags: chatHistoryFlags},
		{name: "list", args: "[--archived] [--json]", summary: "List your chats: ID, title, status, last update.", flags: chatListFlags},
		{name: "interrupt", args: "<chat>", summary: "Interrupt the chat's running turn.", flags: chatInterruptFlags},
		{name: "archive", args: "<chat> [--unarchive]", summary: "Archive (or unarchive) the chat and its family.", flags: chatArchiveFlags},
	}
}

// chatUsage writes chatd chat's help.
func chatUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: chatd chat <action> [arguments] [--url URL] [--token TOKEN] [--stream-url URL]\n\nActions:\n")
	for _, a := range chatActions() {
		fmt.Fprintf(w, "  %-10s %s\n", a.name, a.summary)
	}
	fmt.Fprintf(w, "\nEvery action takes --url (default $%s), --token (default $%s)\n", envChatURL, envChatToken)
	fmt.Fprintf(w, "and --stream-url (default $%s, else the --url). Text \"-\" reads standard input.\n", envChatStreamURL)
	fmt.Fprintf(w, "Run 'chatd chat <action> --help' for an action's arguments.\n")
}

// connFlags are the flags every action takes; valueFlags lists those that
// take a value, so the action word can be found after them.
var valueFlags = map[string]bool{"url": true, "stream-url": true, "token": true}

func runChat(ctx context.Context, e *env, args []string) int {
	actionIdx := findAction(args)
	if actionIdx < 0 {
		for _, a := range args {
			if isHelp(a) {
				chatUsage(e.stdout)
				return exitOK
			}
		}
		fmt.Fprintln(e.stderr, "chatd chat: missing action.")
		chatUsage(e.stderr)
		return exitUsage
	}
	word := args[actionIdx]
	if word == "help" {
		chatUsage(e.stdout)
		return exitOK
	}
	var action *chatAction
	for _, a := range chatActions() {
		if a.name == word {
			action = a
		}
	}
	if action == nil {
		fmt.Fprintf(e.stderr, "chatd chat: unknown action %q.\n", word)
		chatUsage(e.stderr)
		return exitUsage
	}
	rest := append(append([]string{}, args[:actionIdx]...), args[actionIdx+1:]...)

	name := "chatd chat " + action.name
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	urlFlag := fs.String("url", "", "chatd's URL, e.g. http://localhost:8080 (default $"+envChatURL+").")
	streamFlag := fs.String("stream-url", "", "The stream's URL when it is not behind --url (default $"+envChatStreamURL+", else --url).")
	tokenFlag := fs.String("token", "", "The bearer token (default $"+envChatToken+"; see 'chatd token').")
	runAction := action.flags(fs)
	x := &chatRun{e: e, name: name}
	x.usage = func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s %s\n\n%s\n\nFlags:\n", name, action.args, action.summary)
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(w, "  --%-11s %s\n", f.Name, f.Usage)
		})
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(e.stderr, name+": "+format+"\n", a...)
		x.usage(e.stderr)
		return exitUsage
	}

	positional, err := parseChatArgs(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		x.usage(e.stdout)
		return exitOK
	}
	if err != nil {
		return fail("%s.", err)
	}

	base := firstNonEmpty(*urlFlag, e.getenv(envChatURL))
	if base == "" {
		return fail("no chatd URL: set %s or pass --url.", envChatURL)
	}
	if base, err = normalizeURL(base); err != nil {
		return fail("--url %s.", err)
	}
	stream := firstNonEmpty(*streamFlag, e.getenv(envChatStreamURL))
	if stream == "" {
		stream = base
	} else if stream, err = normalizeURL(stream); err != nil {
		return fail("--stream-url %s.", err)
	}
	token := strings.TrimSpace(firstNonEmpty(*tokenFlag, e.getenv(envChatToken)))
	if token == "" {
		return fail("no token: set %s or pass --token (make one with 'chatd token').", envChatToken)
	}
	x.client = newChatClient(base, stream, token)
	return runAction(ctx, x, positional)
}

// findAction returns the index of the first argument that is neither a flag
// nor a connection flag's value, or -1.
func findAction(args []string) int {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return -1
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return i
		}
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && valueFlags[name] {
			i++ // skip the value
		}
	}
	return -1
}

// parseChatArgs parses args with fs, allowing flags between positional
// arguments; everything after "--" is positional.
func parseChatArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		before := len(args)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		// fs.Parse stops at a positional argument or consumes "--" and
		// stops: tell the two apart by what it consumed.
		consumed := args[:before-len(rest)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func isHelp(a string) bool {
	return a == "-h" || a == "-help" || a == "--help"
}

// fail reports an API or transport error as "chatd: <message> (HTTP n)".
func (x *chatRun) fail(err error) int {
	fmt.Fprintf(x.e.stderr, "chatd: %v\n", err)
	return exitFailed
}

// usageError reports a bad command line.
func (x *chatRun) usageError(format string, a ...any) int {
	fmt.Fprintf(x.e.stderr, x.name+": "+format+"\n", a...)
	x.usage(x.e.stderr)
	return exitUsage
}

// chatID takes the chat ID from the first positional argument.
func (x *chatRun) chatID(args []string) (string, []string, bool) {
	if len(args) == 0 {
		x.usageError("missing the chat ID.")
		return "", nil, false
	}
	id, err := uuid.Parse(args[0])
	if err != nil || len(args[0]) != 36 {
		x.usageError("%q is not a chat ID; chat IDs are UUIDs such as %s ('chatd chat list' shows yours).", args[0], uuid.NewString())
		return "", nil, false
	}
	return id.String(), args[1:], true
}

// text joins the text arguments; a lone "-" reads standard input.
func (x *chatRun) text(args []string) (string, error) {
	if len(args) == 1 && args[0] == "-" {
		if x.e.stdin == nil {
			return "", errors.New("no standard input")
		}
		raw, err := io.ReadAll(x.e.stdin)
		if err != nil {
			return "", fmt.Errorf("read standard input: %w", err)
		}
		return strings.TrimRight(string(raw), "\r\n"), nil
	}
	return strings.Join(args, " "), nil
}

// printJSON writes v indented.
func (x *chatRun) printJSON(v any) int {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return x.fail(err)
	}
	fmt.Fprintln(x.e.stdout, string(raw))
	return exitOK
}

func chatNewFlags(fs *flag.FlagSet) func(context.Context, *chatRun, []string) int {
	model := fs.String("model", "", "The model config ID (default: the organization's default model).")
	title := fs.String("title", "", "The chat's title (default: derived from the first message).")
	asJSON := fs.Bool("json", false, "Print the created chat as JSON instead of its ID.")
	return func(ctx context.Context, x *chatRun, args []string) int {
		text, err := x.text(args)
		if err != nil {
			return x.usageError("%s.", err)
		}
		req := createChatRequest{Title: *title, ModelConfigID: *model}
		if strings.TrimSpace(text) != "" {
			req.Content = textContent(text)
		}
		ch, raw, err := x.client.createChat(ctx, req)
		if err != nil {
			return x.fail(err)
		}
		if *asJSON {
			return x.printJSON(raw)
		}
		fmt.Fprintln(x.e.stdout, ch.ID)
		return exitOK
	}
}

func chatSendFlags(fs *flag.FlagSet) func(context.Context, *chatRun, []string) int {
	interrupt := fs.Bool("interrupt", false, "When the chat is busy, interrupt its turn and send the message next.")
	queue := fs.Bool("queue", false, "When the chat is busy, queue the message behind its turn (the default).")
	asJSON := fs.Bool("json", false, "Print the server's answer as JSON.")
	return func(ctx context.Context, x *chatRun, args []string) int {
		chatID, args, ok := x.chatID(args)
		if !ok {
			return exitUsage
		}
		if *interrupt && *queue {
			return x.usageError("--interrupt and --queue exclude each other.")
		}
		text, err := x.text(args)
		if err != nil {
			return x.usageError("%s.", err)
		}
		if strings.TrimSpace(text) == "" {
			return x.usageError("missing the message text (or \"-\" to read it from standard input).")
		}
		req := sendMessageRequest{Content: textContent(text)}
		switch {
		case *interrupt:
			req.BusyBehavior = "interrupt"
		case *queue:
			req.BusyBehavior = "queue"
		}
		resp, raw, err := x.client.sendMessage(ctx, chatID, req)
		if err != nil {
			return x.fail(err)
		}
		switch {
		case *asJSON:
			return x.printJSON(raw)
		case resp.Queued && resp.QueuedMessage != nil && *interrupt:
			fmt.Fprintf(x.e.stdout, "interrupted the running turn; message %s goes next (queued until the interruption lands)\n", resp.QueuedMessage.ID)
		case resp.Queued && resp.QueuedMessage != nil:
			fmt.Fprintf(x.e.stdout, "queued message %s (the chat is busy)\n", resp.QueuedMessage.ID)
		case resp.Message != nil:
			fmt.Fprintf(x.e.stdout, "sent message %s\n", resp.Message.ID)
		}
		return exitOK
	}
}

func chatListFlags(fs *flag.FlagSet) func(context.Context, *chatRun, []string) int {
	archived := fs.Bool("archived", false, "List archived chats instead.")
	asJSON := fs.Bool("json", false, "Print the chats as a JSON array.")
	return func(ctx context.Context, x *chatRun, args []string) int {
		if len(args) > 0 {
			return x.usageError("unexpected argument %q.", args[0])
		}
		chats, raws, err := x.client.listChats(ctx, *archived)
		if err != nil {
			return x.fail(err)
		}
		if *asJSON {
			if raws == nil {
				raws = []json.RawMessage{}
			}
			return x.printJSON(raws)
		}
		if len(chats) == 0 {
			if *archived {
				fmt.Fprintln(x.e.stderr, "No archived chats.")
			} else {
				fmt.Fprintln(x.e.stderr, "No chats yet: start one with 'chatd chat new <text>'.")
			}
			return exitOK
		}
		tw := tabwriter.NewWriter(x.e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTITLE\tSTATUS\tUPDATED")
		for _, c := range chats {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.ID, shorten(c.Title, 40), c.Status, formatTime(c.UpdatedAt))
		}
		if err := tw.Flush(); err != nil {
			return exitFailed
		}
		return exitOK
	}
}

func chatHistoryFlags(fs *flag.FlagSet) func(context.Context, *chatRun, []string) int {
	pageSize := fs.Int("page-size", 200, "Messages per request (1 to 1000).")
	asJSON := fs.Bool("json", false, "Print the messages as a JSON array.")
	return func(ctx context.Context, x *chatRun, args []string) int {
		chatID, args, ok := x.chatID(args)
		if !ok {
			return exitUsage
		}
		if len(args) > 0 {
			return x.usageError("unexpected argument %q.", args[0])
		}
		if *pageSize < 1 || *pageSize > 1000 {
			return x.usageError("--page-size must be between 1 and 1000.")
		}
		msgs, raws, err := x.client.listMessages(ctx, chatID, *pageSize)
		if err != nil {
			return x.fail(err)
		}
		if *asJSON {
			if raws == nil {
				raws = []json.RawMessage{}
			}
			return x.printJSON(raws)
		}
		r := &renderer{out: x.e.stdout}
		for _, m := range msgs {
			r.message(m)
		}
		r.endLine()
		return exitOK
	}
}

func chatInterruptFlags(fs *flag.FlagSet) func(context.Context, *chatRun, []string) int {
	return func(ctx context.Context, x *chatRun, args []string) int {
		chatID, args, ok := x.chatID(args)
		if !ok {
			return exitUsage
		}
		if len(args) > 0 {
			return x.usageError("unexpected argument %q.", args[0])
		}
		ch, err := x.client.interruptChat(ctx, chatID)
		if err != nil {
			return x.fail(err)
		}
		fmt.Fprintf(x.e.stdout, "%s %s\n", ch.ID, ch.Status)
		return exitOK
	}
}

func chatArchiveFlags(fs *flag.FlagSet) func(context.Context, *chatRun, []string) int {
	unarchive := fs.Bool("unarchive", false, "Unarchive the chat instead.")
	return func(ctx context.Context, x *chatRun, args []string) int {
		chatID, args, ok := x.chatID(args)
		if !ok {
			return exitUsage
		}
		if len(args) > 0 {
			return x.usageError("unexpected argument %q.", args[0])
		}
		ch, err := x.client.setArchived(ctx, chatID, !*unarchive)
		if err != nil {
			return x.fail(err)
		}
		word := "archived"
		if !ch.Archived {
			word = "unarchived"
		}
		fmt.Fprintf(x.e.stdout, "%s %s\n", ch.ID, word)
		return exitOK
	}
}

// shorten cuts s to n runes on one line.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// formatTime renders an update time in local time, or "-" when unset.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}
