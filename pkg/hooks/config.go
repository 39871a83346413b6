// Package hooks is chatd's lifecycle hook dispatcher: it signs each event
// with an HS256 JWT, posts it to the one deployment-wide consumer
// (CHATD_HOOK_URL), and parses the consumer's decision strictly. It fails
// closed: a timeout, connection failure, non-2xx status, malformed response
// or capacity exhaustion is a *DispatchError carrying the dispatch ID, and
// the caller stops the triggering operation.
//
// The wire types and the signing primitives are in pkg/agenthooks, the
// consumer SDK, so both sides speak one definition of schema_version 1.
package hooks

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/chatd/chatd/pkg/agenthooks"
	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/pkg/telemetry"
)

// Experiment is the CHATD_EXPERIMENTS entry that activates hooks.
const Experiment = "agent-lifecycle-hooks"

// DefaultTimeout is CHATD_HOOK_TIMEOUT's default.
const DefaultTimeout = 10 * time.Second

// The environment variables of Config.
const (
	EnvEnabled      = "CHATD_HOOK_ENABLED"
	EnvURL          = "CHATD_HOOK_URL"
	EnvSecret       = "CHATD_HOOK_SECRET"
	EnvTimeout      = "CHATD_HOOK_TIMEOUT"
	EnvDeploymentID = "CHATD_DEPLOYMENT_ID"
	EnvExperiments  = telemetry.EnvExperiments
)

// Config is the hook configuration of one process.
type Config struct {
	// Enabled is the break-glass switch (CHATD_HOOK_ENABLED, default
	// true): false makes every other hook setting inert.
	Enabled bool
	// URL is the consumer's HTTPS URL and the JWT audience
	// (CHATD_HOOK_URL). Empty makes the settings inert.
	URL string
	// Secret is the HS256 signing key, at least 32 bytes
	// (CHATD_HOOK_SECRET).
	Secret string
	// Timeout bounds one dispatch, its retry included
	// (CHATD_HOOK_TIMEOUT, default 10s).
	Timeout time.Duration
	// DeploymentID is the JWT issuer (CHATD_DEPLOYMENT_ID).
	DeploymentID string
	// Experiments is CHATD_EXPERIMENTS, comma separated; hooks dispatch
	// only with Experiment among them.
	Experiments []string
	// HTTPClient, when set, is the client dispatches are posted with. It
	// is not a setting: tests set it to trust a test certificate. An
	// explicit WithHTTPClient option wins over it.
	HTTPClient *http.Client
}

// Configured reports whether the settings are live enough to validate:
// enabled with a URL. Validation does not depend on the experiment.
func (c Config) Configured() bool { return c.Enabled && c.URL != "" }

// ExperimentEnabled reports whether CHATD_EXPERIMENTS lists Experiment.
func (c Config) ExperimentEnabled() bool {
	for _, e := range c.Experiments {
		if e == Experiment {
			return true
		}
	}
	return false
}

// Active reports whether events are dispatched: configured and the
// experiment enabled.
func (c Config) Active() bool { return c.Configured() && c.ExperimentEnabled() }

// Validate checks a configured Config (see Configured); an unconfigured one
// is inert and always valid. The errors name the variables.
func (c Config) Validate() error {
	if !c.Configured() {
		return nil
	}
	var errs []error
	if err := checkURL(c.URL); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", EnvURL, err))
	}
	if len(c.Secret) < agenthooks.MinSecretLen {
		errs = append(errs, fmt.Errorf("%s: %d bytes, at least %d are required when %s is set",
			EnvSecret, len(c.Secret), agenthooks.MinSecretLen, EnvURL))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("%s: must be positive", EnvTimeout))
	}
	if strings.TrimSpace(c.DeploymentID) == "" {
		errs = append(errs, fmt.Errorf("%s: required when %s is set (it is the hook JWT's iss)", EnvDeploymentID, EnvURL))
	}
	return errors.Join(errs...)
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "https" {
		return fmt.Errorf("%q is not an HTTPS URL", raw)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%q has no host", raw)
	}
	if u.User != nil {
		return fmt.Errorf("%q must not carry credentials", raw)
	}
	if u.Fragment != "" {
		return fmt.Errorf("%q must not have a fragment", raw)
	}
	return nil
}

// StartupWarning returns the warning to log at startup, or "": a configured
// hook without the experiment is inactive.
func (c Config) StartupWarning() string {
	if c.Configured() && !c.ExperimentEnabled() {
		return fmt.Sprintf("lifecycle hooks are configured (%s) but the experiment %q is not in %s: no hook events will be dispatched",
			EnvURL, Experiment, EnvExperiments)
	}
	return ""
}

// LogStartup logs StartupWarning as a warning, or an info line when hooks
// are active.
func (c Config) LogStartup(logger *slog.Logger) {
	if w := c.StartupWarning(); w != "" {
		logger.Warn(w)
		return
	}
	if c.Active() {
		logger.Info("lifecycle hooks active", "url", c.URL, "timeout", c.Timeout.String(), "issuer", c.DeploymentID)
	}
}

// Declare adds the hook settings (and CHATD_DEPLOYMENT_ID and
// CHATD_EXPERIMENTS) to v, with Validate as a cross-setting check, so a
// service reports a bad hook configuration at startup with its other
// settings.
func (c *Config) Declare(v *service.Vars) {
	v.Var(EnvEnabled, "true",
		"Lifecycle hooks break-glass switch: false disables every hook setting without validating it.",
		func(raw string) error {
			b, err := strconv.ParseBool(raw)
			if err != nil {
				return fmt.Errorf("not a boolean: %q", raw)
			}
			c.Enabled = b
			return nil
		})
	v.String(&c.URL, EnvURL, "",
		"HTTPS URL of the lifecycle hook consumer, also the JWT audience; empty disables hooks.")
	v.SecretVar(EnvSecret,
		"HS256 key (at least 32 bytes) that signs every hook dispatch; required with CHATD_HOOK_URL.",
		func(raw string) error {
			c.Secret = raw
			return nil
		})
	v.Duration(&c.Timeout, EnvTimeout, DefaultTimeout,
		"How long one hook dispatch (its single retry included) may take before it fails closed.")
	v.String(&c.DeploymentID, EnvDeploymentID, "",
		"This deployment's ID, the iss of hook JWTs; required with CHATD_HOOK_URL.")
	v.Var(EnvExperiments, "",
		"Comma-separated experiments to enable (agent-lifecycle-hooks activates lifecycle hooks).",
		func(raw string) error {
			c.Experiments = SplitList(raw)
			return nil
		})
	// A closure, not the method value c.Validate, which would copy *c now.
	v.Check(func() error { return c.Validate() })
}

// LoadConfig reads the hook settings from lookupEnv (os.LookupEnv) and
// validates them. An empty variable counts as unset.
func LoadConfig(lookupEnv func(string) (string, bool)) (Config, error) {
	get := func(k string) string {
		v, _ := lookupEnv(k)
		return v
	}
	c := Config{Enabled: true, Timeout: DefaultTimeout}
	var errs []error
	if raw := get(EnvEnabled); raw != "" {
		b, err := strconv.ParseBool(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: not a boolean: %q", EnvEnabled, raw))
		}
		c.Enabled = b
	}
	c.URL = get(EnvURL)
	c.Secret = get(EnvSecret)
	if raw := get(EnvTimeout); raw != "" {
		d, err := time.ParseDuration(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", EnvTimeout, err))
		}
		c.Timeout = d
	}
	c.DeploymentID = get(EnvDeploymentID)
	c.Experiments = SplitList(get(EnvExperiments))
	if len(errs) == 0 {
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return c, errors.Join(errs...)
}

// SplitList splits a comma-separated list, trimming spaces and dropping
// empty entries.
func SplitList(raw string) []string {
	var out []string
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
