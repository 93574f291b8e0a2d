// Package deploy holds workrouter's deployment artefacts (the Grafana
// dashboard in grafana/workrouter.json) and the tests that keep them in
// step with the code: every metric the dashboard queries must be one that
// the consumer or router package exports. It has no Go API.
package deploy
