package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// setting is one flag and the environment variable it overrides.
type setting struct {
	flag, env, def, usage string
}

var settings = []setting{
	{"listen", "AGENTHOOKS_LISTEN", "127.0.0.1:8443", "host:port to listen on."},
	{"secret", "AGENTHOOKS_SECRET", "", "HS256 secret(s) chatd signs with (CHATD_HOOK_SECRET), comma separated to accept several during a rotation; each at least 32 bytes. Required."},
	{"audience", "AGENTHOOKS_AUDIENCE", "", "The exact CHATD_HOOK_URL chatd dispatches to (the aud claim). Required: without it every request is rejected."},
	{"issuer", "AGENTHOOKS_ISSUER", "", "Expected iss, chatd's CHATD_DEPLOYMENT_ID. Empty accepts any non-empty issuer signed with the secret."},
	{"tls-cert", "AGENTHOOKS_TLS_CERT", "", "PEM certificate file; with --tls-key the server speaks HTTPS."},
	{"tls-key", "AGENTHOOKS_TLS_KEY", "", "PEM private key file for --tls-cert."},
	{"log-only", "AGENTHOOKS_LOG_ONLY", "true", "Log every event and answer with an empty response; false enables --deny-tool and --replace-prompt."},
	{"deny-tool", "AGENTHOOKS_DENY_TOOL", "", "Regular expression: deny pre_tool_use for tool names it matches (needs --log-only=false)."},
	{"replace-prompt", "AGENTHOOKS_REPLACE_PROMPT", "", "REGEX=REPLACEMENT: rewrite matching prompt text in user_prompt_submit (needs --log-only=false; $1 refers to groups)."},
}

type options struct {
	listen          string
	secrets         [][]byte
	audience        string
	issuer          string
	tlsCert, tlsKey string
	logOnly         bool
	denyTool        *regexp.Regexp
	replaceRe       *regexp.Regexp
	replaceWith     string
}

// parseOptions reads the environment, then the flags, which override it.
func parseOptions(args []string, lookupEnv func(string) (string, bool)) (options, error) {
	raw := map[string]string{}
	for _, s := range settings {
		raw[s.flag] = s.def
		if v, ok := lookupEnv(s.env); ok && v != "" {
			raw[s.flag] = v
		}
	}
	fs := flag.NewFlagSet("agenthooks-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, s := range settings {
		fs.Func(s.flag, s.usage, func(v string) error {
			raw[s.flag] = v
			return nil
		})
	}
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o := options{
		listen:   raw["listen"],
		audience: raw["audience"],
		issuer:   raw["issuer"],
		tlsCert:  raw["tls-cert"],
		tlsKey:   raw["tls-key"],
	}
	var errs []error
	short := false
	for _, s := range strings.Split(raw["secret"], ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if len(s) < 32 {
			errs = append(errs, fmt.Errorf("--secret: a secret has %d bytes, at least 32 are required", len(s)))
			short = true
			continue
		}
		o.secrets = append(o.secrets, []byte(s))
	}
	if len(o.secrets) == 0 && !short {
		errs = append(errs, errors.New("--secret (AGENTHOOKS_SECRET) is required"))
	}
	if o.audience == "" {
		errs = append(errs, errors.New("--audience (AGENTHOOKS_AUDIENCE) is required: the exact CHATD_HOOK_URL"))
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	}
	logOnly, err := strconv.ParseBool(raw["log-only"])
	if err != nil {
		errs = append(errs, fmt.Errorf("--log-only: not a boolean: %q", raw["log-only"]))
	}
	o.logOnly = logOnly
	if v := raw["deny-tool"]; v != "" {
		if o.denyTool, err = regexp.Compile(v); err != nil {
			errs = append(errs, fmt.Errorf("--deny-tool: %v", err))
		}
	}
	if v := raw["replace-prompt"]; v != "" {
		re, repl, ok := strings.Cut(v, "=")
		if !ok || re == "" {
			errs = append(errs, errors.New("--replace-prompt: want REGEX=REPLACEMENT"))
		} else if o.replaceRe, err = regexp.Compile(re); err != nil {
			errs = append(errs, fmt.Errorf("--replace-prompt: %v", err))
		}
		o.replaceWith = repl
	}
	if o.logOnly && (o.denyTool != nil || o.replaceRe != nil) {
		errs = append(errs, errors.New("--deny-tool and --replace-prompt need --log-only=false"))
	}
	return o, errors.Join(errs...)
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `Usage: agenthooks-server [flags]

The reference chatd lifecycle hook consumer. It verifies every request
(signature, issuer, audience, time, dispatch ID, type, body hash, subject),
logs one JSON object per event to stdout, and by default answers with an
empty (no-op) response.

Every flag can be set by its environment variable; the flag overrides it.

`)
	for _, s := range settings {
		def := ""
		if s.def != "" {
			def = fmt.Sprintf(" (default %q)", s.def)
		}
		fmt.Fprintf(w, "  --%s, %s%s\n        %s\n", s.flag, s.env, def, s.usage)
	}
}
