// Package deploy holds workrouter's deployment artefacts and the tests
// that keep them in step with the code:
//
//   - Dockerfile: a multi-stage build of a small, static, non-root image of
//     the workrouter CLI (TestDockerfile runs its build command as a plain
//     go build and checks the binary is static);
//   - kubernetes/: a worker Deployment with its probes, grace period,
//     preStop and PodDisruptionBudget, a KEDA ScaledObject scaling on lag,
//     and the embedded broker as a development-only manifest
//     (TestManifests decodes every object strictly into its typed
//     Kubernetes API object, so a misspelt field fails);
//   - grafana/workrouter.json: a dashboard, every metric of which the
//     consumer or router package exports (TestDashboard).
//
// It is a module of its own (github.com/workrouter/workrouter/deploy), so
// that the Kubernetes API modules its tests need stay out of the library's
// module graph. It has no Go API.
package deploy
