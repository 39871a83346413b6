package deploy

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// repoRoot is the repository root, relative to this module's directory.
const repoRoot = ".."

// services are chatd's four service binaries. Their ports, health names and
// timeouts are read from the sources (see facts), so the deployment files
// are checked against the code rather than against a copy of it.
var services = []string{"api", "worker", "stream", "relay"}

// facts are what the deployment files must agree with, read from the Go
// sources of the services and pkg/service.
type facts struct {
	grpcPort map[string]int // CHATD_GRPC_ADDR default per service
	httpPort map[string]int // CHATD_HTTP_ADDR default; absent: no HTTP listener
	// drainSeconds is the worker's CHATD_DRAIN_SECONDS default.
	drainSeconds int
	// unregisterSeconds bounds the worker's database work after the drain.
	unregisterSeconds int
	// shutdownSeconds is the CHATD_SHUTDOWN_TIMEOUT default.
	shutdownSeconds int
	// goVersion is go.work's go directive.
	goVersion string
	// workspaceDirs are go.work's use directories.
	workspaceDirs []string
}

// source returns the Go source of file, or, when file is a directory, of
// every non-test .go file under it (the services keep their wiring in
// services/<svc>/<svc>server, which may move).
func source(t *testing.T, file string) []byte {
	t.Helper()
	path := filepath.Join(repoRoot, file)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !st.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var all []byte
	err = filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "internal") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			all = append(all, b...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func mustMatch(t *testing.T, file, pattern string) string {
	t.Helper()
	m := regexp.MustCompile(pattern).FindSubmatch(source(t, file))
	if m == nil {
		t.Fatalf("%s: no match for %q; update this test's reading of the source", file, pattern)
	}
	return string(m[1])
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func readFacts(t *testing.T) *facts {
	t.Helper()
	f := &facts{grpcPort: map[string]int{}, httpPort: map[string]int{}}
	for _, s := range services {
		dir := "services/" + s
		f.grpcPort[s] = atoi(t, mustMatch(t, dir, `DeclareCommon\(v, ":(\d+)"\)`))
		src := source(t, dir)
		if m := regexp.MustCompile(`"CHATD_HTTP_ADDR", ":(\d+)"`).FindSubmatch(src); m != nil {
			f.httpPort[s] = atoi(t, string(m[1]))
		}
	}
	f.drainSeconds = atoi(t, mustMatch(t, "services/worker", `defaultDrainSeconds\s*=\s*(\d+)`))
	f.unregisterSeconds = atoi(t, mustMatch(t, "services/worker", `stopTimeout\s*=\s*(\d+) \* time\.Second`))
	f.shutdownSeconds = atoi(t, mustMatch(t, "pkg/service/config.go", `DefaultShutdownTimeout\s*=\s*(\d+) \* time\.Second`))
	mustMatch(t, "pkg/service/run.go", `(return "chatd\.v1\." \+ name)`)
	f.goVersion = mustMatch(t, "go.work", `(?m)^go (\S+)$`)
	use := mustMatch(t, "go.work", `(?s)use \((.*?)\)`)
	for _, l := range strings.Fields(use) {
		f.workspaceDirs = append(f.workspaceDirs, strings.TrimPrefix(l, "./"))
	}
	if len(f.httpPort) == 0 || f.httpPort["api"] == 0 || f.httpPort["stream"] == 0 {
		t.Fatalf("expected HTTP listeners on api and stream, read %v", f.httpPort)
	}
	return f
}

// healthName is the gRPC health service a service registers (service.HealthName).
func healthName(svc string) string { return "chatd.v1." + svc }

// --- Kubernetes objects, only the fields the checks read ---

type meta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   meta   `yaml:"metadata"`
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type intOrString struct {
	Int   int
	Str   string
	IsStr bool
}

func (p *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Tag == "!!int" {
		return n.Decode(&p.Int)
	}
	p.IsStr = true
	return n.Decode(&p.Str)
}

func (p intOrString) String() string {
	if p.IsStr {
		return strconv.Quote(p.Str)
	}
	return strconv.Itoa(p.Int)
}

type probe struct {
	GRPC *struct {
		Port    int     `yaml:"port"`
		Service *string `yaml:"service"`
	} `yaml:"grpc"`
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
	TCPSocket *struct {
		Port intOrString `yaml:"port"`
	} `yaml:"tcpSocket"`
	Exec *struct{} `yaml:"exec"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name     string `yaml:"name"`
			Key      string `yaml:"key"`
			Optional bool   `yaml:"optional"`
		} `yaml:"secretKeyRef"`
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env     []envVar `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      *struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	SecurityContext *struct {
		RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
		RunAsUser                *int64 `yaml:"runAsUser"`
		ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
	} `yaml:"securityContext"`
}

type podTemplate struct {
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		TerminationGracePeriodSeconds *int   `yaml:"terminationGracePeriodSeconds"`
		RestartPolicy                 string `yaml:"restartPolicy"`
		SecurityContext               *struct {
			RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
			RunAsUser    *int64 `yaml:"runAsUser"`
		} `yaml:"securityContext"`
		InitContainers []container `yaml:"initContainers"`
		Containers     []container `yaml:"containers"`
	} `yaml:"spec"`
}

type deployment struct {
	object `yaml:",inline"`
	Spec   struct {
		Selector labelSelector `yaml:"selector"`
		Template podTemplate   `yaml:"template"`
	} `yaml:"spec"`
}

type serviceObj struct {
	object `yaml:",inline"`
	Spec   struct {
		ClusterIP string            `yaml:"clusterIP"`
		Selector  map[string]string `yaml:"selector"`
		Ports     []servicePort     `yaml:"ports"`
	} `yaml:"spec"`
}

type servicePort struct {
	Name       string      `yaml:"name"`
	Port       int         `yaml:"port"`
	TargetPort intOrString `yaml:"targetPort"`
}

type pdb struct {
	object `yaml:",inline"`
	Spec   struct {
		MinAvailable   *intOrString  `yaml:"minAvailable"`
		MaxUnavailable *intOrString  `yaml:"maxUnavailable"`
		Selector       labelSelector `yaml:"selector"`
	} `yaml:"spec"`
}

type hpa struct {
	object `yaml:",inline"`
	Spec   struct {
		ScaleTargetRef struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Name       string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicas *int  `yaml:"minReplicas"`
		MaxReplicas int   `yaml:"maxReplicas"`
		Metrics     []any `yaml:"metrics"`
	} `yaml:"spec"`
}

type job struct {
	object `yaml:",inline"`
	Spec   struct {
		Template podTemplate `yaml:"template"`
	} `yaml:"spec"`
}

type configMap struct {
	object `yaml:",inline"`
	Data   map[string]string `yaml:"data"`
}

// rendered is the output of one kustomization, decoded by kind and name.
type rendered struct {
	dir         string
	all         []object
	deployments map[string]*deployment
	services    map[string]*serviceObj
	pdbs        map[string]*pdb
	hpas        map[string]*hpa
	jobs        map[string]*job
	configMaps  map[string]*configMap
	secrets     map[string]bool
}

// render builds the kustomization in dir with the kustomize library, like
// `kustomize build dir` (or `kubectl apply -k dir`).
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := &rendered{
		dir:         dir,
		deployments: map[string]*deployment{},
		services:    map[string]*serviceObj{},
		pdbs:        map[string]*pdb{},
		hpas:        map[string]*hpa{},
		jobs:        map[string]*job{},
		configMaps:  map[string]*configMap{},
		secrets:     map[string]bool{},
	}
	for _, res := range m.Resources() {
		b, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var o object
		mustDecode(t, b, &o)
		r.all = append(r.all, o)
		name := o.Metadata.Name
		switch o.Kind {
		case "Deployment":
			r.deployments[name] = decode[deployment](t, b)
		case "Service":
			r.services[name] = decode[serviceObj](t, b)
		case "PodDisruptionBudget":
			r.pdbs[name] = decode[pdb](t, b)
		case "HorizontalPodAutoscaler":
			r.hpas[name] = decode[hpa](t, b)
		case "Job":
			r.jobs[name] = decode[job](t, b)
		case "ConfigMap":
			r.configMaps[name] = decode[configMap](t, b)
		case "Secret":
			r.secrets[name] = true
		}
	}
	return r
}

func mustDecode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

func decode[T any](t *testing.T, b []byte) *T {
	t.Helper()
	v := new(T)
	mustDecode(t, b, v)
	return v
}

// kustomizations are every kustomization under kustomize/: the base and the
// example overlays. Each must render and pass the same checks.
func kustomizations(t *testing.T) []string {
	t.Helper()
	dirs := []string{"kustomize/base"}
	overlays, err := filepath.Glob("kustomize/overlays/*/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range overlays {
		dirs = append(dirs, filepath.Dir(o))
	}
	return dirs
}

func TestKustomize(t *testing.T) {
	f := readFacts(t)
	for _, dir := range kustomizations(t) {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			r := render(t, dir)
			for _, svc := range services {
				t.Run(svc, func(t *testing.T) { checkService(t, f, r, svc) })
			}
			checkMigrateJob(t, r)
			checkCommon(t, r)
		})
	}
}

// subset reports whether every pair of sel is in labels.
func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// resolvePort returns the containerPort p names (by number or port name)
// among c's declared ports, or 0.
func resolvePort(c *container, p intOrString) int {
	for _, cp := range c.Ports {
		if (p.IsStr && cp.Name == p.Str) || (!p.IsStr && cp.ContainerPort == p.Int) {
			return cp.ContainerPort
		}
	}
	return 0
}

// probePort returns the port a probe targets among c's declared ports (0
// when it targets an undeclared one) and a description.
func probePort(t *testing.T, c *container, p *probe) (int, string) {
	t.Helper()
	switch {
	case p.GRPC != nil:
		svc := ""
		if p.GRPC.Service != nil {
			svc = *p.GRPC.Service
		}
		return resolvePort(c, intOrString{Int: p.GRPC.Port}), fmt.Sprintf("grpc %d %q", p.GRPC.Port, svc)
	case p.HTTPGet != nil:
		return resolvePort(c, p.HTTPGet.Port), fmt.Sprintf("httpGet %s %s", p.HTTPGet.Port, p.HTTPGet.Path)
	case p.TCPSocket != nil:
		return resolvePort(c, p.TCPSocket.Port), fmt.Sprintf("tcpSocket %s", p.TCPSocket.Port)
	}
	t.Errorf("container %s: probe without grpc, httpGet or tcpSocket (exec cannot run in a distroless image)", c.Name)
	return 0, "?"
}

func env(c *container, name string) *envVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func envIndex(c *container, name string) int {
	return slices.IndexFunc(c.Env, func(e envVar) bool { return e.Name == name })
}

// setting returns the value a container sees for a plain CHATD_* setting:
// its env, else a ConfigMap it loads with envFrom, else def.
func setting(r *rendered, c *container, name, def string) string {
	if e := env(c, name); e != nil {
		return e.Value
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			if cm := r.configMaps[ef.ConfigMapRef.Name]; cm != nil {
				if v, ok := cm.Data[name]; ok && v != "" {
					return v
				}
			}
		}
	}
	return def
}

func portOfAddr(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return atoi(t, p)
}

func checkService(t *testing.T, f *facts, r *rendered, svc string) {
	name := "chatd-" + svc
	d, s, b, h := r.deployments[name], r.services[name], r.pdbs[name], r.hpas[name]
	for kind, ok := range map[string]bool{"Deployment": d != nil, "Service": s != nil, "PodDisruptionBudget": b != nil, "HorizontalPodAutoscaler": h != nil} {
		if !ok {
			t.Errorf("%s: no %s %s", r.dir, kind, name)
		}
	}
	if d == nil {
		return
	}
	pod := &d.Spec.Template
	podLabels := pod.Metadata.Labels
	if !subset(d.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("Deployment %s: selector %v does not select its pods %v", name, d.Spec.Selector.MatchLabels, podLabels)
	}

	// The container, its ports and its probes.
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("Deployment %s: %d containers, want 1", name, len(pod.Spec.Containers))
	}
	c := &pod.Spec.Containers[0]
	if img := strings.SplitN(c.Image, ":", 2)[0]; !strings.HasSuffix(img, "chatd-"+svc) {
		t.Errorf("Deployment %s: image %q, want chatd-%s[:tag]", name, c.Image, svc)
	}
	grpcPort := portOfAddr(t, setting(r, c, "CHATD_GRPC_ADDR", fmt.Sprintf(":%d", f.grpcPort[svc])))
	if grpcPort != f.grpcPort[svc] {
		t.Errorf("Deployment %s: CHATD_GRPC_ADDR port %d, want the documented default %d", name, grpcPort, f.grpcPort[svc])
	}
	if resolvePort(c, intOrString{Int: grpcPort}) == 0 {
		t.Errorf("Deployment %s: gRPC port %d is not a containerPort (%v)", name, grpcPort, c.Ports)
	}
	wantPorts := []int{grpcPort}
	httpPort, hasHTTP := f.httpPort[svc]
	if hasHTTP {
		httpPort = portOfAddr(t, setting(r, c, "CHATD_HTTP_ADDR", fmt.Sprintf(":%d", httpPort)))
		if resolvePort(c, intOrString{Int: httpPort}) == 0 {
			t.Errorf("Deployment %s: HTTP port %d is not a containerPort (%v)", name, httpPort, c.Ports)
		}
		wantPorts = append(wantPorts, httpPort)
	}
	// A separate metrics listener (CHATD_METRICS_ADDR), when configured, may
	// be declared too.
	listening := slices.Clone(wantPorts)
	if addr := setting(r, c, "CHATD_METRICS_ADDR", ""); addr != "" {
		listening = append(listening, portOfAddr(t, addr))
	}
	for _, cp := range c.Ports {
		if !slices.Contains(listening, cp.ContainerPort) {
			t.Errorf("Deployment %s: containerPort %d is not a port %s listens on (%v)", name, cp.ContainerPort, svc, listening)
		}
	}

	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		t.Fatalf("Deployment %s: readinessProbe and livenessProbe are both required", name)
	}
	for kind, p := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		port, desc := probePort(t, c, p)
		if port == 0 {
			t.Errorf("Deployment %s: %s probe (%s) targets no declared containerPort", name, kind, desc)
		}
		if p.GRPC != nil && port != 0 && port != grpcPort {
			t.Errorf("Deployment %s: %s gRPC probe on %d, but gRPC health listens on %d", name, kind, port, grpcPort)
		}
		if p.GRPC != nil && p.GRPC.Service != nil && *p.GRPC.Service != "" && *p.GRPC.Service != healthName(svc) {
			t.Errorf("Deployment %s: %s probe asks for health service %q, which %s does not register (want %q or \"\")",
				name, kind, *p.GRPC.Service, svc, healthName(svc))
		}
		if p.HTTPGet != nil && (port != httpPort || p.HTTPGet.Path != "/healthz") {
			t.Errorf("Deployment %s: %s probe %s, want GET /healthz on the HTTP port %d", name, kind, desc, httpPort)
		}
	}
	if p := c.ReadinessProbe.GRPC; p == nil || p.Service == nil || *p.Service != healthName(svc) {
		t.Errorf("Deployment %s: readiness must be the gRPC health of %q", name, healthName(svc))
	}
	if hasHTTP && c.LivenessProbe.HTTPGet == nil && c.ReadinessProbe.HTTPGet == nil {
		t.Errorf("Deployment %s: no probe checks GET /healthz on the HTTP listener", name)
	}

	// The Service routes to the pods' declared ports.
	if s != nil {
		if !subset(s.Spec.Selector, podLabels) {
			t.Errorf("Service %s: selector %v does not select the Deployment's pods %v", name, s.Spec.Selector, podLabels)
		}
		if len(s.Spec.Ports) == 0 {
			t.Errorf("Service %s: no ports", name)
		}
		targets := []int{}
		for _, sp := range s.Spec.Ports {
			tp := sp.TargetPort
			if !tp.IsStr && tp.Int == 0 {
				tp = intOrString{Int: sp.Port} // targetPort defaults to port
			}
			got := resolvePort(c, tp)
			if got == 0 {
				t.Errorf("Service %s: port %s targets %s, not a containerPort of %s", name, sp.Name, tp, name)
			}
			targets = append(targets, got)
		}
		for _, p := range wantPorts {
			if !slices.Contains(targets, p) {
				t.Errorf("Service %s: does not expose the container's port %d", name, p)
			}
		}
	}
	if b != nil {
		if !subset(b.Spec.Selector.MatchLabels, podLabels) {
			t.Errorf("PodDisruptionBudget %s: selector %v does not select the pods %v", name, b.Spec.Selector.MatchLabels, podLabels)
		}
		if (b.Spec.MinAvailable == nil) == (b.Spec.MaxUnavailable == nil) {
			t.Errorf("PodDisruptionBudget %s: set exactly one of minAvailable and maxUnavailable", name)
		}
	}
	if h != nil {
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.Name != name || ref.APIVersion != "apps/v1" {
			t.Errorf("HorizontalPodAutoscaler %s: scales %s %s (%s), want apps/v1 Deployment %s", name, ref.Kind, ref.Name, ref.APIVersion, name)
		}
		if h.APIVersion != "autoscaling/v2" || h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 ||
			h.Spec.MaxReplicas < *h.Spec.MinReplicas || len(h.Spec.Metrics) == 0 {
			t.Errorf("HorizontalPodAutoscaler %s: want autoscaling/v2 with 1 <= minReplicas <= maxReplicas and a metric", name)
		}
	}

	// Shutdown: the grace period covers everything the service does after SIGTERM.
	if pod.Spec.TerminationGracePeriodSeconds == nil {
		t.Fatalf("Deployment %s: set terminationGracePeriodSeconds explicitly", name)
	}
	grace := *pod.Spec.TerminationGracePeriodSeconds
	shutdown, err := time.ParseDuration(setting(r, c, "CHATD_SHUTDOWN_TIMEOUT", fmt.Sprintf("%ds", f.shutdownSeconds)))
	if err != nil {
		t.Fatal(err)
	}
	need := int(shutdown.Seconds())
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		need += c.Lifecycle.PreStop.Sleep.Seconds
	}
	if svc == "worker" {
		drain := atoi(t, setting(r, c, "CHATD_DRAIN_SECONDS", strconv.Itoa(f.drainSeconds)))
		need += drain + f.unregisterSeconds
		if grace <= drain {
			t.Errorf("Deployment %s: terminationGracePeriodSeconds %d <= CHATD_DRAIN_SECONDS %d", name, grace, drain)
		}
	}
	if grace <= need {
		t.Errorf("Deployment %s: terminationGracePeriodSeconds %d, but a stop may take %d s", name, grace, need)
	}

	// Security: non-root, read-only root filesystem, no privilege escalation.
	checkPodSecurity(t, "Deployment "+name, pod)

	// Settings every service needs.
	checkDatabaseURL(t, r, "Deployment "+name, c)
	if svc == "worker" || svc == "relay" {
		checkAdvertise(t, name, c, grpcPort)
	}
	if svc == "stream" {
		relayAddr := setting(r, c, "CHATD_RELAY_ADDR", "")
		host, port, err := net.SplitHostPort(relayAddr)
		if err != nil {
			t.Fatalf("Deployment %s: CHATD_RELAY_ADDR %q: %v", name, relayAddr, err)
		}
		rs := r.services[strings.SplitN(host, ".", 2)[0]]
		if rs == nil || rs.Metadata.Name != "chatd-relay" {
			t.Errorf("Deployment %s: CHATD_RELAY_ADDR %q does not name the relay's Service chatd-relay", name, relayAddr)
		} else if !slices.ContainsFunc(rs.Spec.Ports, func(p servicePort) bool { return strconv.Itoa(p.Port) == port }) {
			t.Errorf("Deployment %s: CHATD_RELAY_ADDR port %s is not a port of Service chatd-relay", name, port)
		}
	}
	if f.httpPort[svc] != 0 && env(c, "CHATD_AUTH_SECRET") == nil && setting(r, c, "CHATD_AUTH_JWKS_URL", "") == "" {
		t.Errorf("Deployment %s: neither CHATD_AUTH_SECRET nor CHATD_AUTH_JWKS_URL is set; %s refuses to start", name, svc)
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil && r.configMaps[ef.ConfigMapRef.Name] == nil {
			t.Errorf("Deployment %s: envFrom ConfigMap %s is not in the output", name, ef.ConfigMapRef.Name)
		}
	}
}

func checkPodSecurity(t *testing.T, what string, pod *podTemplate) {
	t.Helper()
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: pod securityContext.runAsNonRoot must be true", what)
	}
	if sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
		t.Errorf("%s: pod runs as uid 0", what)
	}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		csc := c.SecurityContext
		if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
			t.Errorf("%s: container %s: readOnlyRootFilesystem must be true", what, c.Name)
		}
		if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
			t.Errorf("%s: container %s: allowPrivilegeEscalation must be false", what, c.Name)
		}
		if csc != nil && csc.RunAsUser != nil && *csc.RunAsUser == 0 {
			t.Errorf("%s: container %s runs as uid 0", what, c.Name)
		}
	}
}

// checkDatabaseURL requires CHATD_DATABASE_URL from a Secret (it holds the
// Postgres password); an overlay that generates the Secret must match its name.
func checkDatabaseURL(t *testing.T, r *rendered, what string, c *container) {
	t.Helper()
	e := env(c, "CHATD_DATABASE_URL")
	if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.Value != "" {
		t.Errorf("%s: CHATD_DATABASE_URL must come from a secretKeyRef", what)
		return
	}
	ref := e.ValueFrom.SecretKeyRef
	if ref.Optional {
		t.Errorf("%s: CHATD_DATABASE_URL's secretKeyRef must not be optional", what)
	}
	if len(r.secrets) > 0 && !r.secrets[ref.Name] {
		t.Errorf("%s: CHATD_DATABASE_URL reads Secret %s, which the output does not contain (it has %v)", what, ref.Name, r.secrets)
	}
}

// checkAdvertise requires CHATD_ADVERTISE_ADDR = $(POD_IP):<grpc port>, with
// POD_IP from the downward API declared before it (so $(POD_IP) expands).
func checkAdvertise(t *testing.T, name string, c *container, grpcPort int) {
	t.Helper()
	adv, ip := env(c, "CHATD_ADVERTISE_ADDR"), env(c, "POD_IP")
	if adv == nil || ip == nil {
		t.Errorf("Deployment %s: needs POD_IP (downward API) and CHATD_ADVERTISE_ADDR", name)
		return
	}
	if ip.ValueFrom == nil || ip.ValueFrom.FieldRef == nil || ip.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("Deployment %s: POD_IP must come from fieldRef status.podIP", name)
	}
	if want := fmt.Sprintf("$(POD_IP):%d", grpcPort); adv.Value != want {
		t.Errorf("Deployment %s: CHATD_ADVERTISE_ADDR %q, want %q", name, adv.Value, want)
	}
	if envIndex(c, "POD_IP") > envIndex(c, "CHATD_ADVERTISE_ADDR") {
		t.Errorf("Deployment %s: POD_IP must be declared before CHATD_ADVERTISE_ADDR for $(POD_IP) to expand", name)
	}
}

func checkMigrateJob(t *testing.T, r *rendered) {
	var found []*job
	for _, j := range r.jobs {
		for _, c := range j.Spec.Template.Spec.Containers {
			argv := append(slices.Clone(c.Command), c.Args...)
			if i := slices.Index(argv, "migrate"); i >= 0 && i+1 < len(argv) && argv[i+1] == "up" {
				found = append(found, j)
				if img := strings.SplitN(c.Image, ":", 2)[0]; !strings.HasSuffix(img, "chatd") {
					t.Errorf("Job %s: image %q, want the chatd CLI image", j.Metadata.Name, c.Image)
				}
				checkDatabaseURL(t, r, "Job "+j.Metadata.Name, &c)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: want exactly one Job running `chatd migrate up`, found %d", r.dir, len(found))
	}
	j := found[0]
	if rp := j.Spec.Template.Spec.RestartPolicy; rp != "Never" && rp != "OnFailure" {
		t.Errorf("Job %s: restartPolicy %q", j.Metadata.Name, rp)
	}
	checkPodSecurity(t, "Job "+j.Metadata.Name, &j.Spec.Template)
}

func checkCommon(t *testing.T, r *rendered) {
	for _, o := range r.all {
		if o.Metadata.Labels["app.kubernetes.io/part-of"] != "chatd" {
			t.Errorf("%s %s: missing the common label app.kubernetes.io/part-of=chatd", o.Kind, o.Metadata.Name)
		}
	}
	if n := len(r.deployments); n != len(services) {
		t.Errorf("%s: %d Deployments, want %d (one per service)", r.dir, n, len(services))
	}
}

// --- compose.yaml ---

type composeService struct {
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Image     string   `yaml:"image"`
	Command   []string `yaml:"command"`
	User      string   `yaml:"user"`
	ReadOnly  bool     `yaml:"read_only"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Environment     map[string]string `yaml:"environment"`
	Ports           []string          `yaml:"ports"`
	Expose          []string          `yaml:"expose"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
}

// composeVar matches ${VAR}, ${VAR:-default} and ${VAR:?message} (group 2 is
// the default).
var composeVar = regexp.MustCompile(`^\$\{(\w+)(?::?[-?]([^}]*))?\}$`)

func TestCompose(t *testing.T) {
	f := readFacts(t)
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cf struct {
		Services map[string]composeService `yaml:"services"`
	}
	mustDecode(t, b, &cf)

	m, ok := cf.Services["migrate"]
	if !ok {
		t.Fatal("compose.yaml: no migrate service")
	}
	if !slices.Equal(m.Command, []string{"migrate", "up"}) {
		t.Errorf("compose migrate: command %v, want [migrate up]", m.Command)
	}
	checkComposeBuild(t, "migrate", m, "chatd")
	if !strings.Contains(m.Environment["CHATD_DATABASE_URL"], "${CHATD_DATABASE_URL") {
		t.Errorf("compose migrate: CHATD_DATABASE_URL must come from the environment")
	}

	for _, svc := range services {
		s, ok := cf.Services[svc]
		if !ok {
			t.Errorf("compose.yaml: no %s service", svc)
			continue
		}
		checkComposeBuild(t, svc, s, "chatd-"+svc)
		if dep, ok := s.DependsOn["migrate"]; !ok || dep.Condition != "service_completed_successfully" {
			t.Errorf("compose %s: must depend on migrate with condition service_completed_successfully", svc)
		}
		for _, v := range []string{"CHATD_DATABASE_URL", "CHATD_NATS_URL"} {
			if !strings.Contains(s.Environment[v], "${"+v) {
				t.Errorf("compose %s: %s must come from the environment (external %s), got %q", svc, v, v, s.Environment[v])
			}
		}
		if addr := s.Environment["CHATD_GRPC_ADDR"]; addr != "" && portOfAddr(t, addr) != f.grpcPort[svc] {
			t.Errorf("compose %s: CHATD_GRPC_ADDR %q, want port %d", svc, addr, f.grpcPort[svc])
		}
		if addr := s.Environment["CHATD_HTTP_ADDR"]; addr != "" && portOfAddr(t, addr) != f.httpPort[svc] {
			t.Errorf("compose %s: CHATD_HTTP_ADDR %q, want port %d", svc, addr, f.httpPort[svc])
		}
		if f.httpPort[svc] != 0 {
			want := fmt.Sprintf(":%d", f.httpPort[svc])
			if !slices.ContainsFunc(s.Ports, func(p string) bool { return strings.HasSuffix(p, want) }) {
				t.Errorf("compose %s: HTTP port %d is not published (%v)", svc, f.httpPort[svc], s.Ports)
			}
		}
		if s.StopGracePeriod == "" {
			t.Errorf("compose %s: set stop_grace_period", svc)
		} else {
			grace, err := time.ParseDuration(s.StopGracePeriod)
			if err != nil {
				t.Fatalf("compose %s: stop_grace_period: %v", svc, err)
			}
			need := time.Duration(f.shutdownSeconds) * time.Second
			if svc == "worker" {
				drain := f.drainSeconds
				if v := s.Environment["CHATD_DRAIN_SECONDS"]; v != "" {
					if mm := composeVar.FindStringSubmatch(v); mm != nil {
						v = mm[2]
					}
					drain = atoi(t, v)
				}
				need += time.Duration(drain+f.unregisterSeconds) * time.Second
			}
			if grace <= need {
				t.Errorf("compose %s: stop_grace_period %s, but a stop may take %s", svc, grace, need)
			}
		}
	}
	stream := cf.Services["stream"]
	if host, port, err := net.SplitHostPort(stream.Environment["CHATD_RELAY_ADDR"]); err != nil || host != "relay" || atoi(t, port) != f.grpcPort["relay"] {
		t.Errorf("compose stream: CHATD_RELAY_ADDR %q, want relay:%d", stream.Environment["CHATD_RELAY_ADDR"], f.grpcPort["relay"])
	}
}

func checkComposeBuild(t *testing.T, name string, s composeService, image string) {
	t.Helper()
	if s.Build == nil {
		t.Errorf("compose %s: no build section", name)
		return
	}
	// The build context is the repository root (the go.work workspace).
	ctx := filepath.Clean(s.Build.Context)
	if abs, _ := filepath.Abs(ctx); abs != mustAbs(t, repoRoot) {
		t.Errorf("compose %s: build context %q is not the repository root", name, s.Build.Context)
	}
	want := "deploy/docker/" + strings.TrimPrefix(image, "chatd-") + ".Dockerfile"
	if s.Build.Dockerfile != want {
		t.Errorf("compose %s: dockerfile %q, want %q", name, s.Build.Dockerfile, want)
	}
	if _, err := os.Stat(filepath.Join(ctx, s.Build.Dockerfile)); err != nil {
		t.Errorf("compose %s: %v", name, err)
	}
	if img := strings.SplitN(s.Image, ":", 2)[0]; img != image {
		t.Errorf("compose %s: image %q, want %s:<tag> (the name the Kustomize base uses)", name, s.Image, image)
	}
	if u := strings.SplitN(s.User, ":", 2)[0]; u == "" || u == "0" || u == "root" {
		t.Errorf("compose %s: user %q, want a numeric non-root uid", name, s.User)
	}
	if !s.ReadOnly {
		t.Errorf("compose %s: want read_only: true", name)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// --- Dockerfiles ---

// instruction is one Dockerfile instruction with continuation lines joined.
type instruction struct {
	cmd  string // upper-case keyword
	args string
}

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(line)
		fields := strings.SplitN(strings.TrimSpace(cur.String()), " ", 2)
		in := instruction{cmd: strings.ToUpper(fields[0])}
		if len(fields) == 2 {
			in.args = strings.TrimSpace(fields[1])
		}
		out = append(out, in)
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var goBuildOut = regexp.MustCompile(`go build .*-o (\S+) (\./\S+)`)

func TestDockerfiles(t *testing.T) {
	f := readFacts(t)
	images := map[string]string{"chatd": "cmd/chatd"}
	for _, s := range services {
		images[s] = "services/" + s
	}
	for name, pkgDir := range images {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("docker", name+".Dockerfile")
			ins := parseDockerfile(t, path)
			args := map[string]string{}
			var stages []int // index of each FROM
			for i, in := range ins {
				switch in.cmd {
				case "FROM":
					stages = append(stages, i)
				case "ARG":
					if k, v, ok := strings.Cut(in.args, "="); ok && len(stages) == 0 {
						args[k] = v
					}
				}
			}
			if len(stages) < 2 {
				t.Fatalf("%s: %d stages, want a multi-stage build", path, len(stages))
			}
			builder := os.Expand(ins[stages[0]].args, func(k string) string { return args[k] })
			if want := "golang:" + f.goVersion; !strings.HasPrefix(builder, want+" ") {
				t.Errorf("%s: builder FROM %q, want %s (go.work's go version)", path, builder, want)
			}
			last := ins[stages[len(stages)-1]:]
			final := strings.Fields(last[0].args)[0]
			if !strings.HasPrefix(final, "gcr.io/distroless/static") && final != "scratch" {
				t.Errorf("%s: final stage FROM %s, want distroless/static or scratch", path, final)
			}

			var build []string
			for _, in := range ins[:stages[len(stages)-1]] {
				if in.cmd == "RUN" {
					if m := goBuildOut.FindStringSubmatch(in.args); m != nil {
						build = m
					}
				}
				if in.cmd == "ENV" && strings.Contains(in.args, "CGO_ENABLED=0") {
					args["CGO_ENABLED"] = "0"
				}
				if in.cmd == "RUN" && strings.Contains(in.args, "CGO_ENABLED=0 go build") {
					args["CGO_ENABLED"] = "0"
				}
			}
			if args["CGO_ENABLED"] != "0" {
				t.Errorf("%s: the builder must set CGO_ENABLED=0 (static binary)", path)
			}
			if build == nil {
				t.Fatalf("%s: no `go build -o <out> ./<pkg>` in the builder", path)
			}
			if filepath.Clean(build[2]) != pkgDir {
				t.Errorf("%s: builds %s, want ./%s", path, build[2], pkgDir)
			}
			if _, err := os.Stat(filepath.Join(repoRoot, pkgDir, "main.go")); err != nil {
				t.Errorf("%s: %v", path, err)
			}
			bin := filepath.Base(build[1])

			var user, entry string
			var exposed []int
			copied := false
			for _, in := range last[1:] {
				switch in.cmd {
				case "USER":
					user = in.args
				case "EXPOSE":
					for _, p := range strings.Fields(in.args) {
						exposed = append(exposed, atoi(t, strings.TrimSuffix(p, "/tcp")))
					}
				case "ENTRYPOINT":
					entry = in.args
				case "COPY":
					if strings.Contains(in.args, "--from=") && strings.Contains(in.args, build[1]) {
						copied = true
					}
				}
			}
			uid := strings.SplitN(user, ":", 2)[0]
			if n, err := strconv.Atoi(uid); err != nil || n == 0 {
				t.Errorf("%s: final stage USER %q, want a numeric non-root uid", path, user)
			}
			if !copied {
				t.Errorf("%s: the final stage does not COPY --from the builder's %s", path, build[1])
			}
			if !strings.Contains(entry, `"/`+bin+`"`) {
				t.Errorf("%s: ENTRYPOINT %s does not run /%s", path, entry, bin)
			}
			var want []int
			if name != "chatd" {
				want = append(want, f.grpcPort[name])
				if p, ok := f.httpPort[name]; ok {
					want = append(want, p)
				}
			}
			for _, p := range want {
				if !slices.Contains(exposed, p) {
					t.Errorf("%s: EXPOSE %v lacks %d, a port the service listens on by default", path, exposed, p)
				}
			}

			// The context is the workspace: the ignore file must keep go.work and
			// every module it uses.
			checkDockerignore(t, path+".dockerignore", f.workspaceDirs)
		})
	}
}

func checkDockerignore(t *testing.T, path string, keep []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: %v (without it the whole repository, .git included, is sent)", path, err)
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		p := strings.TrimSpace(line)
		if p == "" || strings.HasPrefix(p, "#") || strings.HasPrefix(p, "!") {
			continue
		}
		for _, k := range append([]string{"go.work", "go.work.sum"}, keep...) {
			if ok, _ := filepath.Match(p, k); ok || strings.HasPrefix(k, strings.TrimSuffix(p, "/")+"/") || p == k {
				t.Errorf("%s: %q excludes %s, which the workspace build needs", path, p, k)
			}
		}
	}
}
