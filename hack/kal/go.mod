module github.com/turnstile-dev/turnstile/hack/kal

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	golang.org/x/tools v0.47.0
	sigs.k8s.io/kube-api-linter v0.0.0-20260716143926-092fe0c72997
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/golangci/plugin-module-register v0.1.2 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/mod v0.37.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	k8s.io/gengo/v2 v2.0.0-20250922181213-ec3ebc5fd46b // indirect
	k8s.io/utils v0.0.0-20260707023825-cf1189d6abe3 // indirect
)
