package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/turnstile-dev/turnstile/internal/fleet/members"
	"github.com/turnstile-dev/turnstile/internal/plugin/cmd/util"
)

const (
	// DefaultTokenDuration is join's --duration: the agent does not renew its hub credential
	// (docs/fleet.md, "Joining a cluster"), so the token must outlive the time between two
	// rotations; 90 days is a common credential rotation period, and short enough that a
	// kubeconfig that leaks stops working on its own.
	DefaultTokenDuration = 90 * 24 * time.Hour
	// minTokenDuration is the shortest token the TokenRequest API issues.
	minTokenDuration = 10 * time.Minute
	// DefaultSecretKey is the key of the chart's fleet.spoke.hubKubeconfigKey default.
	DefaultSecretKey = "kubeconfig"
	// DefaultSecretNamespace is where docs/install.md installs the chart.
	DefaultSecretNamespace = "turnstile-system"
	// installHub says how to make a cluster a hub.
	installHub = "install the hub's side of a fleet on it: kubectl apply --server-side -k config/fleet, or the chart with fleet.role=hub (docs/fleet.md)"
)

// What the agent (internal/fleet/spoke) names so, without its code in the plugin; the tests
// hold them equal.
const (
	labelCluster    = "fleet.turnstile.dev/cluster"
	defaultHubLease = 40 * time.Second
)

// serviceAccount is the spoke's ServiceAccount in turnstile-fleet, spoke-<cluster>: the name the
// hub's policies read the cluster from (spoke.LeaseName).
func serviceAccount(cluster string) string { return "spoke-" + cluster }

// testHookBeforeUpdate runs between a members read and its write (a test's concurrent writer).
var testHookBeforeUpdate func()

// joinOptions are join's flags.
type joinOptions struct {
	labels          []string
	duration        time.Duration
	hubServer       string
	output          string
	secret          string
	secretNamespace string
	secretKey       string
}

// NewCmdJoin is `fleet join NAME`: the hub admin's one command to admit a cluster.
func NewCmdJoin(g *util.Globals) *cobra.Command {
	o := joinOptions{}
	cmd := &cobra.Command{
		Use:   "join NAME",
		Short: "Admit cluster NAME into the fleet (run against the hub): membership, its ServiceAccount, and the hub kubeconfig its agent runs with",
		Long: `join admits cluster NAME into the fleet whose hub the current kubeconfig names. It

  - checks NAME: a DNS-1123 label (lower case letters, digits and '-', at most 63), the rule the
    hub's admission policies apply to a spoke's cluster name;
  - lists NAME in the members ConfigMap turnstile-fleet/turnstile-fleet-members, with its labels
    (--label, for CommandLocks scoped by cluster labels): {"labels":{...}};
  - makes the ServiceAccount turnstile-fleet/spoke-NAME, the identity the hub's roles and
    policies give the spoke's agent (its own requests and hub Leases only);
  - asks the TokenRequest API for a token of it, valid for --duration, and writes a kubeconfig of
    the hub as spoke-NAME: the spoke's agent runs with it as --hub-kubeconfig. With --secret, a
    Secret manifest holding it instead, ready to apply in the spoke for the chart's
    fleet.role=spoke (fleet.spoke.hubKubeconfigSecret).

The kubeconfig goes to stdout, or to --output FILE (mode 0600); what join did goes to stderr.
It holds a credential: keep it as a Secret.

Running join again is safe: it changes no label it is not given (--label k=v sets, --label k-
removes), keeps the ServiceAccount, and writes a new token. That is how a credential is rotated
before it expires: join again, apply the new Secret in the spoke, and restart its agent
(kubectl -n turnstile-system rollout restart deployment), which reads --hub-kubeconfig when it
starts. An old token stays valid until it expires; to revoke every token at once, run leave.

The hub's server and certificate authority are the current kubeconfig's; --hub-server names the
address the spoke reaches the hub at when it differs. The spoke's agent also needs the role
turnstile-fleet-spoke bound in each fleet namespace on the hub (once for every spoke: the chart's
fleet.namespaces, or kubectl create rolebinding, docs/fleet.md).

join needs, on the hub: get and update on configmaps turnstile-fleet-members, get and create on
serviceaccounts, and create on serviceaccounts/token, in namespace turnstile-fleet.`,
		Example: `  # On the hub: admit eu-west-1, labelled region=eu, and install its credential in the spoke
  kubectl turnstile fleet join eu-west-1 --label region=eu --secret turnstile-hub \
    | kubectl --context eu-west-1 apply --server-side -f -
  helm install turnstile turnstile.tgz -n turnstile-system --set fleet.role=spoke \
    --set fleet.clusterName=eu-west-1 --set fleet.spoke.hubKubeconfigSecret=turnstile-hub

  # A kubeconfig file for a manager run by hand (manager --hub-kubeconfig=hub.kubeconfig)
  kubectl turnstile fleet join eu-west-1 -o hub.kubeconfig --hub-server https://hub.example.com:6443`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), g, args[0], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&o.labels, "label", nil, "A label of the cluster, key=value (repeatable); key- removes one. CommandLocks select clusters by them (spec.clusters.selector).")
	fs.DurationVar(&o.duration, "duration", DefaultTokenDuration, "How long the token is valid (at least 10m; the hub's --service-account-max-token-expiration may shorten it). Run join again before it ends.")
	fs.StringVar(&o.hubServer, "hub-server", "", "The hub's API server as the spoke reaches it (default: the current kubeconfig's server).")
	fs.StringVarP(&o.output, "output", "o", "", "Write to FILE (mode 0600) instead of stdout.")
	fs.StringVar(&o.secret, "secret", "", "Write a Secret manifest of this name holding the kubeconfig (the chart's fleet.spoke.hubKubeconfigSecret), to apply in the spoke.")
	fs.StringVar(&o.secretNamespace, "secret-namespace", DefaultSecretNamespace, "With --secret, the Secret's namespace: the spoke chart's release namespace.")
	fs.StringVar(&o.secretKey, "secret-key", DefaultSecretKey, "With --secret, the key holding the kubeconfig (the chart's fleet.spoke.hubKubeconfigKey).")
	return cmd
}

// ValidateName refuses a cluster name the hub's policies would refuse (a DNS-1123 label).
func ValidateName(name string) error {
	// guard:fleet-join-name-valid
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("cluster name %q is refused: %s (the hub's policies take a spoke's cluster name only as a DNS-1123 label, e.g. eu-west-1)",
			name, strings.Join(errs, "; "))
	}
	return nil
}

// ParseLabels reads --label values: key=value sets, key- removes. Pure.
func ParseLabels(specs []string) (set map[string]string, remove []string, err error) {
	set = map[string]string{}
	for _, s := range specs {
		if k, ok := strings.CutSuffix(s, "-"); ok && !strings.Contains(s, "=") {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				return nil, nil, fmt.Errorf("--label %s: %s", s, strings.Join(errs, "; "))
			}
			remove = append(remove, k)
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return nil, nil, fmt.Errorf("--label %s: want key=value (or key- to remove one)", s)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, nil, fmt.Errorf("--label %s: key: %s", s, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, nil, fmt.Errorf("--label %s: value: %s", s, strings.Join(errs, "; "))
		}
		set[k] = v
	}
	return set, remove, nil
}

// run is join: check everything that can be checked before a write, then the membership, the
// ServiceAccount, the token and the output, in that order.
func (o *joinOptions) run(ctx context.Context, g *util.Globals, name string, stdout, stderr io.Writer) error {
	set, remove, err := o.validate(name)
	if err != nil {
		return err
	}
	cfg, err := g.Flags.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	c, _, err := g.Client()
	if err != nil {
		return err
	}
	out, err := openOutput(o.output)
	if err != nil {
		return err
	}
	sa := serviceAccount(name) // the ServiceAccount spoke-NAME, as the hub's policies name it
	if err := checkRights(ctx, c, "join", []right{
		{"get", "configmaps", "", members.ConfigMap}, {"update", "configmaps", "", members.ConfigMap},
		{"get", "serviceaccounts", "", sa}, {"create", "serviceaccounts", "", ""}, {"create", "serviceaccounts", "token", sa},
	}); err != nil {
		return err
	}
	if err := addMember(ctx, c, stderr, name, set, remove); err != nil {
		return err
	}
	if err := ensureServiceAccount(ctx, c, stderr, name, sa); err != nil {
		return err
	}
	token, expires, err := requestToken(ctx, c, sa, o.duration)
	if err != nil {
		return err
	}
	if got := time.Until(expires); got < o.duration-time.Minute {
		fmt.Fprintf(stderr, "warning: the hub issued a token valid until %s, shorter than --duration %s (its --service-account-max-token-expiration): rotate before then\n",
			expires.UTC().Format(time.RFC3339), o.duration)
	}
	if cfg.Insecure {
		fmt.Fprintln(stderr, "warning: the current kubeconfig does not verify the hub's certificate (insecure-skip-tls-verify), and neither will the spoke's: give the hub's CA (--certificate-authority) to verify it")
	}
	data, what, err := o.render(cfg, name, sa, token)
	if err != nil {
		return err
	}
	if err := out.write(data, stdout); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s%s; its token expires at %s: run join again before then\n", what, out.where(), expires.UTC().Format(time.RFC3339))
	return nil
}

// validate checks join's name and flags, and reads its labels.
func (o *joinOptions) validate(name string) (set map[string]string, remove []string, err error) {
	if err := ValidateName(name); err != nil {
		return nil, nil, err
	}
	if set, remove, err = ParseLabels(o.labels); err != nil {
		return nil, nil, err
	}
	if o.duration < minTokenDuration {
		return nil, nil, fmt.Errorf("--duration %s: the TokenRequest API issues tokens of at least %s", o.duration, minTokenDuration)
	}
	if o.secret != "" {
		if errs := validation.IsDNS1123Subdomain(o.secret); len(errs) > 0 {
			return nil, nil, fmt.Errorf("--secret %s: %s", o.secret, strings.Join(errs, "; "))
		}
	}
	return set, remove, nil
}

// addMember lists cluster name in the members, with its labels changed by set and remove; an
// entry that would not change is not written.
func addMember(ctx context.Context, c ctrlclient.Client, stderr io.Writer, name string, set map[string]string, remove []string) error {
	labels, changed, err := updateMembers(ctx, c, stderr, name, func(cm *corev1.ConfigMap) (bool, map[string]string, error) {
		old, had := cm.Data[name]
		labels, rerr := members.Labels(name, old)
		if rerr != nil {
			fmt.Fprintf(stderr, "warning: the entry of %s could not be read, so it is written anew: %v\n", name, rerr)
			labels = map[string]string{}
		}
		next := maps.Clone(labels)
		maps.Copy(next, set)
		for _, k := range remove {
			delete(next, k)
		}
		value, merr := json.Marshal(members.Entry{Labels: next})
		if merr != nil {
			return false, nil, merr
		}
		if had && rerr == nil && maps.Equal(labels, next) {
			return false, next, nil
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[name] = string(value)
		return true, next, nil
	})
	if err != nil {
		return err
	}
	if changed {
		fmt.Fprintf(stderr, "cluster %s is a member of the fleet, labels %s (configmap %s/%s)\n", name, formatLabels(labels), members.Namespace, members.ConfigMap)
	} else {
		fmt.Fprintf(stderr, "cluster %s was a member already, labels %s: unchanged\n", name, formatLabels(labels))
	}
	return nil
}

// render is what join writes: the hub kubeconfig, or the Secret holding it; and what it is.
func (o *joinOptions) render(cfg *rest.Config, name, sa, token string) ([]byte, string, error) {
	kc, err := hubKubeconfig(cfg, o.hubServer, name, sa, token)
	if err != nil {
		return nil, "", err
	}
	what := "a kubeconfig of the hub as " + members.Namespace + "/" + sa
	if o.secret == "" {
		return kc, what, nil
	}
	data, err := secretManifest(o.secret, o.secretNamespace, o.secretKey, name, kc)
	return data, fmt.Sprintf("a Secret %s/%s (key %s) holding %s", o.secretNamespace, o.secret, o.secretKey, what), err
}

// updateMembers reads the members ConfigMap, lets change edit it, and writes it with the
// resourceVersion read, again on a conflict: a concurrent join or edit is never lost.
func updateMembers(ctx context.Context, c ctrlclient.Client, stderr io.Writer, name string,
	change func(*corev1.ConfigMap) (bool, map[string]string, error)) (map[string]string, bool, error) {
	for attempt := 0; ; attempt++ {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: members.Namespace, Name: members.ConfigMap}, &cm); err != nil {
			return nil, false, notAHub(ctx, c, err, "get")
		}
		if cm.Labels["app.kubernetes.io/managed-by"] == "Helm" {
			fmt.Fprintf(stderr, "warning: configmap %s/%s is the chart's: change fleet.members in its values for %s too, or a helm upgrade puts back what the values say\n",
				members.Namespace, members.ConfigMap, name)
		}
		changed, labels, err := change(&cm)
		if err != nil || !changed {
			return labels, false, err
		}
		if testHookBeforeUpdate != nil {
			testHookBeforeUpdate()
		}
		// guard:fleet-join-optimistic
		err = c.Update(ctx, &cm) // carries the resourceVersion read: 409 if it changed since
		switch {
		case err == nil:
			return labels, true, nil
		// guard:fleet-join-retry-conflict
		case apierrors.IsConflict(err) && attempt < 10:
			continue
		default:
			return nil, false, permission(err, "update", "configmaps", members.ConfigMap)
		}
	}
}

// notAHub explains an error reading the members ConfigMap: a cluster without config/fleet
// says what to install.
func notAHub(ctx context.Context, c ctrlclient.Client, err error, verb string) error {
	if !apierrors.IsNotFound(err) {
		return permission(err, verb, "configmaps", members.ConfigMap)
	}
	var ns corev1.Namespace
	if nerr := c.Get(ctx, ctrlclient.ObjectKey{Name: members.Namespace}, &ns); apierrors.IsNotFound(nerr) {
		return fmt.Errorf("this cluster is not a fleet's hub: it has no namespace %s; %s", members.Namespace, installHub)
	}
	return fmt.Errorf("this cluster is not a fleet's hub: it has no configmap %s/%s (the fleet's members, which the hub's admission policies read); %s",
		members.Namespace, members.ConfigMap, installHub)
}

// permission says which permission a forbidden request needed.
func permission(err error, verb, resource, name string) error {
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("%s %s %s/%s: %w", verb, resource, members.Namespace, name, err)
	}
	return fmt.Errorf("you may not %s %s %s in namespace %s on the hub: join and leave need a hub admin's rights there (kubectl turnstile fleet join --help lists them): %w",
		verb, resource, name, members.Namespace, err)
}

// right is a permission join or leave needs in the fleet namespace.
type right struct{ verb, resource, subresource, name string }

func (r right) String() string {
	s := r.verb + " " + r.resource
	if r.subresource != "" {
		s += "/" + r.subresource
	}
	if r.name != "" {
		s += " " + r.name
	}
	return s
}

// checkRights asks the hub (SelfSubjectAccessReview, which every user may) whether the user has
// each right, before anything is written: a refusal names every right missing, and a user who
// lacks one changes nothing.
func checkRights(ctx context.Context, c ctrlclient.Client, command string, rights []right) error {
	var missing []string
	for _, r := range rights {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: members.Namespace, Verb: r.verb, Resource: r.resource,
				Subresource: r.subresource, Name: r.name}}}
		if err := c.Create(ctx, review); err != nil {
			return nil // cannot ask: the writes themselves will say what they were refused
		}
		// guard:fleet-join-rights-first
		if !review.Status.Allowed {
			missing = append(missing, r.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("you may not %s in namespace %s on the hub: fleet %s needs a hub admin's rights there (kubectl turnstile fleet %s --help lists them); nothing was changed",
			strings.Join(missing, ", "), members.Namespace, command, command)
	}
	return nil
}

// ensureServiceAccount makes the spoke's ServiceAccount, or finds it made.
func ensureServiceAccount(ctx context.Context, c ctrlclient.Client, stderr io.Writer, cluster, name string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: members.Namespace, Name: name,
		Labels: map[string]string{labelCluster: cluster, "app.kubernetes.io/managed-by": "kubectl-turnstile"}}}
	err := c.Create(ctx, sa)
	switch {
	case err == nil:
		fmt.Fprintf(stderr, "serviceaccount %s/%s created: the spoke's identity on the hub\n", members.Namespace, name)
		return nil
	case apierrors.IsAlreadyExists(err):
		fmt.Fprintf(stderr, "serviceaccount %s/%s exists: kept\n", members.Namespace, name)
		return nil
	default:
		return permission(err, "create", "serviceaccounts", name)
	}
}

// requestToken asks the TokenRequest API for a token of the ServiceAccount, valid for d.
func requestToken(ctx context.Context, c ctrlclient.Client, name string, d time.Duration) (string, time.Time, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: members.Namespace, Name: name}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(d / time.Second))}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", time.Time{}, permission(err, "create", "serviceaccounts/token", name)
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
}

// hubKubeconfig is a kubeconfig of the hub (cfg's server, or server, and cfg's certificate
// authority) as the spoke's ServiceAccount, with token.
func hubKubeconfig(cfg *rest.Config, server, cluster, sa, token string) ([]byte, error) {
	if server == "" {
		server = cfg.Host
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("the hub's certificate authority: %w", err)
		}
		ca = b
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca, TLSServerName: cfg.ServerName, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: sa, Namespace: members.Namespace}
	kc.CurrentContext = "hub"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of spoke %s: %w", cluster, err)
	}
	return b, nil
}

// secretManifest is the Secret the spoke chart's fleet.role=spoke mounts as --hub-kubeconfig.
func secretManifest(name, namespace, key, cluster string, kubeconfig []byte) ([]byte, error) {
	s := corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{labelCluster: cluster, "app.kubernetes.io/managed-by": "kubectl-turnstile"}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{key: kubeconfig},
	}
	b, err := yaml.Marshal(s)
	if err != nil {
		return nil, err
	}
	// Not the server's fields: a manifest to apply.
	return []byte(strings.Replace(string(b), "  creationTimestamp: null\n", "", 1)), nil
}

// output is where join writes: stdout, or a file made 0600 (atomically, by a rename).
type output struct{ path string }

// openOutput checks, before anything is written on the hub, that path's directory takes a file.
func openOutput(path string) (output, error) {
	if path == "" {
		return output{}, nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".join-*")
	if err != nil {
		return output{}, fmt.Errorf("--output %s: %w", path, err)
	}
	f.Close()
	return output{path: path}, os.Remove(f.Name())
}

func (o output) write(data []byte, stdout io.Writer) error {
	if o.path == "" {
		_, err := stdout.Write(data)
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(o.path), ".join-*") // mode 0600
	if err != nil {
		return fmt.Errorf("--output %s: %w", o.path, err)
	}
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("--output %s: %w", o.path, err)
	}
	if err := os.Rename(f.Name(), o.path); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("--output %s: %w", o.path, err)
	}
	return nil
}

func (o output) where() string {
	if o.path == "" {
		return " to stdout"
	}
	return " to " + o.path + " (mode 0600)"
}

func formatLabels(l map[string]string) string {
	if len(l) == 0 {
		return "(none)"
	}
	var s []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		s = append(s, k+"="+l[k])
	}
	return strings.Join(s, ",")
}
