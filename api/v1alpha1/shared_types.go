package v1alpha1

// LockTarget names one lock: a directory and workspace of a repository, optionally narrowed to
// one Atlantis project. Its key is repo/path/workspace, plus /project when project is set, so two
// projects that share a directory and workspace lock independently.
// +kubebuilder:validation:XValidation:rule="!has(self.project) || size(self.project) > 0",message="project, when set, must not be empty"
// +kubebuilder:validation:XValidation:rule="!has(self.maxHolders) || (has(self.mode) && self.mode == 'Shared')",message="maxHolders makes a Shared lock a counting lock: set mode: Shared with it, or leave maxHolders out"
type LockTarget struct {
	// repo is the repository in owner/name form, e.g. "acme/infra". Nested groups
	// (GitLab's group/subgroup/name) are allowed; "." and ".." are no segment names.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)+$')",message="repo must be owner/name (letters, digits, '_', '.', '-'), e.g. acme/infra"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)\\\\.\\\\.?(/|$)')",message="repo must not contain '.' or '..' segments; name the repository itself, e.g. acme/infra"
	Repo string `json:"repo"`

	// path is the directory inside the repository, relative to its root, e.g. "modules/vpc".
	// Use "." (the default) for the root. Absolute paths, "..", "." segments and trailing
	// slashes are rejected so one directory always has one key.
	// +optional
	// +kubebuilder:default="."
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/')",message="path must be relative to the repository root (no leading '/'), e.g. modules/vpc"
	// +kubebuilder:validation:XValidation:rule="self == '.' || !self.matches('(^|/)\\\\.\\\\.?(/|$)')",message="path must not contain '.' or '..' segments; use the directory's plain relative path, or '.' for the root"
	// +kubebuilder:validation:XValidation:rule="self == '.' || self.matches('^[A-Za-z0-9_.@+=,~-]+(/[A-Za-z0-9_.@+=,~-]+)*$')",message="path must be slash-separated directory names without empty segments or a trailing '/'"
	Path string `json:"path,omitempty"`

	// workspace is the Terraform workspace, "default" unless set.
	// +optional
	// +kubebuilder:default=default
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_][A-Za-z0-9_.-]*$')",message="workspace must be letters, digits, '_', '.', '-' and start with a letter, digit or '_'"
	Workspace string `json:"workspace,omitempty"`

	// project is the Atlantis project name. When set it becomes part of the lock key, so
	// projects sharing a directory and workspace do not block each other.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_][A-Za-z0-9_.-]*$')",message="project must be letters, digits, '_', '.', '-' and start with a letter, digit or '_'"
	Project string `json:"project,omitempty"`

	// mode is how the request holds this target: Exclusive (unset means Exclusive) holds it
	// alone; Shared holds it together with every other Shared request, whatever their
	// identities, and waits while an Exclusive request holds it or waits ahead in the queue
	// (writer preference). Part of a LockRequest's spec only: the key has no mode, and a
	// ProjectLock shows its holders' modes in its status.
	// +optional
	Mode LockMode `json:"mode,omitempty"`

	// maxHolders makes a Shared target a counting lock: the request holds the key only while at
	// most maxHolders requests hold it, itself included, whatever their identities ("at most 3
	// clusters upgrade at a time"). Requests on one key may ask different numbers: every
	// holder's own bound holds, so a request joins only if the holders would then number at
	// most the lowest maxHolders among them and itself. Each counted grant has a fencing token
	// of its own, above every token granted on the key before it. Needs mode Shared; 1 to 100.
	// Unset: a Shared request holds beside up to 100 (the most that hold one key).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxHolders int32 `json:"maxHolders,omitempty"`
}

// LockMode is how a request holds a lock target.
// +kubebuilder:validation:Enum=Exclusive;Shared
type LockMode string

// Lock modes.
const (
	// ModeExclusive holds a key alone (or with requests of the same identity, re-entrant).
	ModeExclusive LockMode = "Exclusive"
	// ModeShared holds a key together with every other Shared holder.
	ModeShared LockMode = "Shared"
)

// IsShared reports whether the mode is Shared; unset is Exclusive.
func (m LockMode) IsShared() bool { return m == ModeShared }

// Holder identifies who holds (or wants) a lock. Identity is owner, pull, session and cluster,
// compared field by field (HolderID): a request from an identity that already holds a key shares
// that key at once (a pull request's plan, then apply).
type Holder struct {
	// owner is the user or pipeline that holds the lock, e.g. "alice" or "ci/deploy". It is shown
	// to everyone waiting, so it is one line of at most 253 characters: no leading or trailing
	// whitespace and no control characters (newlines, tabs, escapes).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.trim().size() > 0",message="owner must not be blank"
	// +kubebuilder:validation:XValidation:rule="self == self.trim()",message="owner must not start or end with whitespace"
	// +kubebuilder:validation:XValidation:rule="!self.matches('\\\\p{Cc}')",message="owner must not contain control characters (newlines, tabs, escapes)"
	Owner string `json:"owner"`

	// pull is the pull (merge) request number the lock is taken for; 0 or unset when none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Pull int64 `json:"pull,omitempty"`

	// url links to the pull request or pipeline run, shown to people waiting for the lock: an
	// absolute http or https URL with a host, e.g. "https://github.com/acme/infra/pull/100".
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != '' && !self.matches('\\\\s')",message="url must be an http or https URL with a host and no spaces, e.g. https://github.com/acme/infra/pull/100"
	URL string `json:"url,omitempty"`

	// lease names a coordination.k8s.io Lease in the same namespace that the holder keeps
	// renewed. When the Lease lapses or is deleted, the request is released (reason HolderLost),
	// so a crashed runner frees its lock within the lease duration instead of its TTL.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="lease must be the name of a Lease (a DNS subdomain: lowercase letters, digits, '-', '.')"
	Lease string `json:"lease,omitempty"`

	// session tells concurrent runs of one owner (and pull) apart: requests whose session
	// differs are different holders, and never share a key; requests of one owner, pull and
	// session share what that holder holds (plan, then apply). Empty (the default) is one
	// session of its own. One line of at most 253 characters: no leading or trailing whitespace
	// and no control characters, e.g. "run-7f3a" or a CI job id.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == self.trim()",message="session must not start or end with whitespace"
	// +kubebuilder:validation:XValidation:rule="!self.matches('\\\\p{Cc}')",message="session must not contain control characters (newlines, tabs, escapes)"
	Session string `json:"session,omitempty"`

	// cluster is the fleet member the holder runs in (docs/fleet.md): a spoke's agent sets it on
	// the requests it mirrors to the hub, so that two gated Jobs of one name in two clusters are
	// two identities and never share a key. Part of the identity; empty (the default) is the
	// cluster the request was made in. A DNS-1123 label of at most 63 characters, e.g.
	// "eu-west-1"; immutable with the rest of the holder.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="cluster must be a cluster name of the fleet (a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit), e.g. eu-west-1"
	Cluster string `json:"cluster,omitempty"`
}
