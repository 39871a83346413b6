package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/chatd/chatd/cmd/internal/loadgen"
)

// cpuMetric is the process collector's counter of CPU time every chatd
// service exposes at /metrics.
const cpuMetric = "process_cpu_seconds_total"

// serviceMetrics is a --service-metrics flag: name=URL pairs, in order.
type serviceMetrics []serviceMetricsURL

type serviceMetricsURL struct{ name, url string }

func (s *serviceMetrics) String() string {
	parts := make([]string, len(*s))
	for i, m := range *s {
		parts[i] = m.name + "=" + m.url
	}
	return strings.Join(parts, ",")
}

// Set takes name=URL, e.g. worker=http://127.0.0.1:9102/metrics.
func (s *serviceMetrics) Set(v string) error {
	name, raw, ok := strings.Cut(v, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return fmt.Errorf("%q is not name=URL (e.g. worker=http://127.0.0.1:9102/metrics)", v)
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q: the metrics URL must be http(s)://host[:port]/metrics", v)
	}
	for _, m := range *s {
		if m.name == name {
			return fmt.Errorf("service %q is given twice", name)
		}
	}
	*s = append(*s, serviceMetricsURL{name: name, url: u.String()})
	return nil
}

// cpuSample is every service's CPU seconds at one instant.
type cpuSample map[string]float64

// sampleCPU scrapes each service's process CPU counter.
func sampleCPU(ctx context.Context, services serviceMetrics) (cpuSample, error) {
	out := cpuSample{}
	for _, m := range services {
		v, err := scrapeCPU(ctx, m.url)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", m.name, err)
		}
		out[m.name] = v
	}
	return out, nil
}

func scrapeCPU(ctx context.Context, u string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("error reading metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("reading metrics from %s: status %s", u, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, cpuMetric+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s in %s: %w", cpuMetric, u, err)
		}
		return v, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("error reading metrics from %s: %w", u, err)
	}
	return 0, errors.New(u + " has no " + cpuMetric)
}

// cpuPerTurn is each service's CPU time between two samples per OK turn.
func cpuPerTurn(services serviceMetrics, before, after cpuSample, okTurns int) []loadgen.ServiceCPU {
	out := make([]loadgen.ServiceCPU, 0, len(services))
	for _, m := range services {
		secs := after[m.name] - before[m.name]
		c := loadgen.ServiceCPU{Service: m.name, CPUSeconds: secs}
		if okTurns > 0 {
			c.MicrosPerTurn = secs * 1e6 / float64(okTurns)
		}
		out = append(out, c)
	}
	return out
}

func metricsURLs(s serviceMetrics) []string {
	out := make([]string, len(s))
	for i, m := range s {
		out[i] = m.url
	}
	return out
}
