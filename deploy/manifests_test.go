package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// scaledObject mirrors the part of KEDA's ScaledObject (keda.sh/v1alpha1)
// the manifests use, field for field with KEDA's JSON names. KEDA's own Go
// module is not a light dependency (it pulls in its controllers), so the
// test carries this mirror; it is decoded strictly like the Kubernetes
// objects, so a field KEDA does not have (or that the mirror does not
// know yet) fails the test.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			Name                   string `json:"name"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32 `json:"pollingInterval,omitempty"`
		InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
		CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
		IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
		Advanced              *struct {
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
			HorizontalPodAutoscalerConfig *struct {
				Name     string `json:"name,omitempty"`
				Behavior *struct {
					ScaleUp   *hpaRules `json:"scaleUp,omitempty"`
					ScaleDown *hpaRules `json:"scaleDown,omitempty"`
				} `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			UseCachedMetrics  bool              `json:"useCachedMetrics,omitempty"`
			MetricType        string            `json:"metricType,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// hpaRules mirrors autoscaling/v2 HPAScalingRules.
type hpaRules struct {
	StabilizationWindowSeconds *int32  `json:"stabilizationWindowSeconds,omitempty"`
	SelectPolicy               *string `json:"selectPolicy,omitempty"`
	Policies                   []struct {
		Type          string `json:"type"`
		Value         int32  `json:"value"`
		PeriodSeconds int32  `json:"periodSeconds"`
	} `json:"policies,omitempty"`
}

// kafkaScalerKeys are the metadata keys of KEDA's kafka scaler.
var kafkaScalerKeys = []string{
	"bootstrapServers", "consumerGroup", "topic", "lagThreshold", "activationLagThreshold", "offsetResetPolicy",
	"allowIdleConsumers", "scaleToZeroOnInvalidOffset", "excludePersistentLag", "limitToPartitionsWithLag",
	"ensureEvenDistributionOfPartitions", "partitionLimitation", "version", "sasl", "tls", "unsafeSsl",
}

// objects are the manifests' objects, by kind and name.
type objects struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	pdbs        map[string]*policyv1.PodDisruptionBudget
	scaled      map[string]*scaledObject
}

// decodeStrict decodes one YAML document into out, refusing any field out
// does not have.
func decodeStrict(doc []byte, out any) error {
	return yaml.UnmarshalStrict(doc, out)
}

// loadManifests strictly decodes every object of every file in
// kubernetes/ into its typed API object.
func loadManifests(t *testing.T) objects {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in kubernetes/ (%v)", err)
	}
	objs := objects{deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, scaled: map[string]*scaledObject{}}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s, document %d: %v", f, i+1, err)
			}
			where := fmt.Sprintf("%s, document %d (%s %s)", f, i+1, tm.APIVersion, tm.Kind)
			var name string
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				var d appsv1.Deployment
				err = decodeStrict(doc, &d)
				name = d.Name
				objs.deployments[name] = &d
			case "v1 Service":
				var s corev1.Service
				err = decodeStrict(doc, &s)
				name = s.Name
				objs.services[name] = &s
			case "policy/v1 PodDisruptionBudget":
				var p policyv1.PodDisruptionBudget
				err = decodeStrict(doc, &p)
				name = p.Name
				objs.pdbs[name] = &p
			case "keda.sh/v1alpha1 ScaledObject":
				var s scaledObject
				err = decodeStrict(doc, &s)
				name = s.Name
				objs.scaled[name] = &s
			default:
				t.Fatalf("%s: a kind this test does not know; teach it, so that it is decoded strictly", where)
			}
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if name == "" {
				t.Fatalf("%s: no metadata.name", where)
			}
		}
	}
	return objs
}

// TestStrictDecodingRefusesTypos: the decoding the manifests go through
// refuses a field the API object does not have, so the test above cannot
// pass over a typo.
func TestStrictDecodingRefusesTypos(t *testing.T) {
	typo := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  replica: 3\n")
	if err := decodeStrict(typo, &appsv1.Deployment{}); err == nil || !strings.Contains(err.Error(), "replica") {
		t.Fatalf("a Deployment with spec.replica decoded: %v", err)
	}
	var so scaledObject
	if err := decodeStrict([]byte("apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata:\n  name: x\nspec:\n  maxReplicas: 3\n"), &so); err == nil {
		t.Fatal("a ScaledObject with spec.maxReplicas decoded")
	}
}

// flagValue returns the value of --name=value in args.
func flagValue(t *testing.T, args []string, name string) string {
	t.Helper()
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	t.Fatalf("no --%s=… in %v", name, args)
	return ""
}

func envValue(c corev1.Container, name string) (corev1.EnvVar, bool) {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return corev1.EnvVar{}, false
	}
	return c.Env[i], true
}

// TestManifests: every manifest decodes strictly, and the objects agree
// with each other and with what the worker does: probes on the metrics
// port's /readyz and /healthz, a grace period that covers the preStop
// sleep and the revoke timeout, scrape annotations on the metrics port, a
// PodDisruptionBudget and a KEDA ScaledObject that select the worker, and
// a scaler capped at the topic's partition count, on the worker's group
// and topic.
func TestManifests(t *testing.T) {
	objs := loadManifests(t)
	d := objs.deployments["workrouter-worker"]
	if d == nil {
		t.Fatalf("no Deployment workrouter-worker; have %v", objs.deployments)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("worker pod has %d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "worker" {
		t.Fatalf("worker container args %v: want the worker command", c.Args)
	}

	// The metrics port serves the probes and is annotated for scraping.
	addr := flagValue(t, c.Args, "metrics-addr")
	if !strings.HasPrefix(addr, "0.0.0.0:") {
		t.Errorf("--metrics-addr=%s: the kubelet probes the pod's IP, so it must listen on every interface", addr)
	}
	port := strings.TrimPrefix(addr, "0.0.0.0:")
	i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" })
	if i < 0 || fmt.Sprint(c.Ports[i].ContainerPort) != port {
		t.Errorf("container ports %+v: want one named metrics on %s", c.Ports, port)
	}
	ann := d.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != port || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("pod annotations %v: want prometheus.io scrape, port %s and path /metrics", ann, port)
	}
	for probe, want := range map[*corev1.Probe]string{c.ReadinessProbe: "/readyz", c.LivenessProbe: "/healthz"} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.String() != "metrics" {
			t.Errorf("probe %+v: want GET %s on the metrics port", probe, want)
		}
	}

	// The grace period covers preStop + revoke timeout + the ops server's
	// shutdown (5 s) + a margin for the last commit and LeaveGroup (10 s).
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatalf("worker has no preStop sleep: %+v", c.Lifecycle)
	}
	preStop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	revoke, err := time.ParseDuration(flagValue(t, c.Args, "revoke-timeout"))
	if err != nil {
		t.Fatal(err)
	}
	want := preStop + revoke + 5*time.Second + 10*time.Second
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second != want {
		t.Errorf("terminationGracePeriodSeconds %v, want %v (preStop %v + revoke %v + 5s + 10s)", g, want, preStop, revoke)
	}

	// Non-root, and the sink's DSN from a Secret.
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("pod security context %+v: want runAsNonRoot with a non-zero user", sc)
	}
	if e, ok := envValue(c, "WORKROUTER_SINK"); !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Errorf("WORKROUTER_SINK %+v: want it from a Secret", e)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
	}
	if s := d.Spec.Strategy.RollingUpdate; s == nil || s.MaxUnavailable == nil || s.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update %+v: want maxUnavailable 0 (a new worker is ready before an old one leaves)", s)
	}

	// The PodDisruptionBudget and the metrics Service select the workers.
	podLabels := labels.Set(d.Spec.Template.Labels)
	pdb := objs.pdbs["workrouter-worker"]
	if pdb == nil || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Fatalf("PodDisruptionBudget %+v: want maxUnavailable 1", pdb)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("the PodDisruptionBudget's selector %v does not select the worker pods %v (%v)", pdb.Spec.Selector, podLabels, err)
	}
	if svc := objs.services["workrouter-worker-metrics"]; svc == nil || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("the metrics Service does not select the worker pods")
	}

	// The broker (dev only) creates the topic the workers and KEDA use,
	// with the partition count KEDA scales up to.
	b := objs.deployments["workrouter-broker"]
	if b == nil || b.Annotations["workrouter.dev/development-only"] != "true" {
		t.Fatalf("no Deployment workrouter-broker marked development-only")
	}
	bargs := b.Spec.Template.Spec.Containers[0].Args
	topic, partitions := flagValue(t, bargs, "topic"), flagValue(t, bargs, "partitions")
	if got := flagValue(t, c.Args, "topic"); got != topic {
		t.Errorf("the workers consume %q, the dev broker creates %q", got, topic)
	}
	if flagValue(t, bargs, "listen") != "$(POD_IP):9092" {
		t.Errorf("the dev broker must listen on (and so advertise) the pod's IP")
	}
	brokers, _ := envValue(c, "WORKROUTER_BROKERS")
	if svc := objs.services["workrouter-broker"]; svc == nil || brokers.Value != svc.Name+":9092" {
		t.Errorf("the workers' brokers %q are not the broker Service", brokers.Value)
	}

	// On the embedded (dev) broker a long rebalance timeout keeps members
	// that kfake dropped while they waited in a join out of the group for
	// the timeout plus 10 s (docs/chaos.md): docs/operating.md advises at
	// most 2.5 × the session timeout there.
	session, err := time.ParseDuration(flagValue(t, c.Args, "session-timeout"))
	if err != nil {
		t.Fatal(err)
	}
	rebalance, err := time.ParseDuration(flagValue(t, c.Args, "rebalance-timeout"))
	if err != nil {
		t.Fatal(err)
	}
	if max := session * 5 / 2; rebalance > max {
		t.Errorf("--rebalance-timeout=%v with --session-timeout=%v on the dev broker: want at most %v (2.5 × the session)", rebalance, session, max)
	}

	so := objs.scaled["workrouter-worker"]
	if so == nil {
		t.Fatalf("no ScaledObject workrouter-worker")
	}
	if so.Spec.ScaleTargetRef.Name != d.Name {
		t.Errorf("the ScaledObject scales %q, not the worker Deployment", so.Spec.ScaleTargetRef.Name)
	}
	if so.Spec.MaxReplicaCount == nil || fmt.Sprint(*so.Spec.MaxReplicaCount) != partitions {
		t.Errorf("maxReplicaCount %v: want the topic's partition count %s (a worker beyond it owns nothing)", so.Spec.MaxReplicaCount, partitions)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "kafka" {
		t.Fatalf("triggers %+v: want one kafka trigger", so.Spec.Triggers)
	}
	md := so.Spec.Triggers[0].Metadata
	for k := range md {
		if !slices.Contains(kafkaScalerKeys, k) {
			t.Errorf("kafka trigger metadata %q: not a key of KEDA's kafka scaler", k)
		}
	}
	if md["consumerGroup"] != flagValue(t, c.Args, "group") || md["topic"] != topic || md["bootstrapServers"] != brokers.Value ||
		md["allowIdleConsumers"] != "false" {
		t.Errorf("kafka trigger %v: want the workers' group, topic and brokers, and no idle consumers", md)
	}
}
