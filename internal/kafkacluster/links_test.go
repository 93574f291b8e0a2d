package kafkacluster

import (
	"fmt"
	"strings"
	"testing"
)

// parseProps reads a properties file nodeProperties wrote.
func parseProps(t *testing.T, s string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %q", line)
		}
		out[k] = v
	}
	return out
}

// listenerMap maps a listeners value's names to their addresses.
func listenerMap(v string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(v, ",") {
		name, addr, _ := strings.Cut(l, "://")
		out[name] = addr
	}
	return out
}

// TestLinksRouteEveryPathBetweenNodes: with Config.Links on three nodes,
// every node advertises, to each other node j, replication and controller
// endpoints at j's links to it (the names j looks them up by are its
// inter.broker.listener.name and first controller listener), names every
// other voter at its own links, and advertises its client link to
// clients; each link forwards to the listener of its direction. A node
// reaches itself directly.
func TestLinksRouteEveryPathBetweenNodes(t *testing.T) {
	links := map[string]Link{} // proxy address → link
	addrOf := map[string]string{}
	cfg := Config{Nodes: 3, Links: func(l Link) (string, error) {
		addr := fmt.Sprintf("127.0.0.2:%d", 1000+len(links))
		links[addr], addrOf[l.String()] = l, addr
		return addr, nil
	}}
	c := &Cluster{cfg: cfg, dir: t.TempDir()}
	ports := make([]int, portsPerNode(cfg)*cfg.Nodes)
	for i := range ports {
		ports[i] = 20000 + i
	}
	if err := c.layOut(ports); err != nil {
		t.Fatal(err)
	}
	if len(links) != 3+3*2*2 {
		t.Fatalf("%d links, want a client link per node and a replication and a controller link per ordered pair: %v", len(links), links)
	}
	props := map[int32]map[string]string{}
	for _, n := range c.nodes {
		s, err := nodeProperties(cfg, n, c.nodes)
		if err != nil {
			t.Fatal(err)
		}
		props[n.ID] = parseProps(t, s)
	}
	for _, to := range c.nodes {
		p := props[to.ID]
		listen, adv := listenerMap(p["listeners"]), listenerMap(p["advertised.listeners"])
		if got, want := p["inter.broker.listener.name"], fmt.Sprintf("REPLICATION_%d", to.ID); got != want {
			t.Errorf("node %d: inter.broker.listener.name %s, want %s", to.ID, got, want)
		}
		if got, want := strings.Split(p["controller.listener.names"], ",")[0], fmt.Sprintf("CONTROLLER_%d", to.ID); got != want {
			t.Errorf("node %d: first controller listener %s, want %s", to.ID, got, want)
		}
		if adv["PLAINTEXT"] != addrOf[fmt.Sprintf("client→%d", to.ID)] || to.Addr != adv["PLAINTEXT"] || links[to.Addr].Upstream != listen["PLAINTEXT"] {
			t.Errorf("node %d: clients reach it at %s (Addr %s), not through its client link to %s", to.ID, adv["PLAINTEXT"], to.Addr, listen["PLAINTEXT"])
		}
		for _, from := range c.nodes {
			for _, kind := range []string{"REPLICATION", "CONTROLLER"} {
				name := fmt.Sprintf("%s_%d", kind, from.ID)
				if from == to {
					if adv[name] != listen[name] {
						t.Errorf("node %d advertises %s to itself at %s, not its listener %s", to.ID, name, adv[name], listen[name])
					}
					continue
				}
				link := links[adv[name]]
				want := fmt.Sprintf("%s %d→%d", strings.ToLower(kind), from.ID, to.ID)
				if link.String() != want || link.Upstream != listen[name] {
					t.Errorf("node %d advertises %s at %s: link %q to %s, want %q to %s", to.ID, name, adv[name], link, link.Upstream, want, listen[name])
				}
			}
			voter := fmt.Sprintf("%d@%s", to.ID, addrOf[fmt.Sprintf("controller %d→%d", from.ID, to.ID)])
			if from == to {
				voter = fmt.Sprintf("%d@%s", to.ID, to.ControllerAddr)
			}
			if !strings.Contains(","+props[from.ID]["controller.quorum.voters"]+",", ","+voter+",") {
				t.Errorf("node %d's voters %s lack %s", from.ID, props[from.ID]["controller.quorum.voters"], voter)
			}
		}
	}
}

// TestNoLinksByDefault: without Config.Links a node has one broker and
// one controller listener, dialled directly.
func TestNoLinksByDefault(t *testing.T) {
	cfg := Config{Nodes: 3}
	c := &Cluster{cfg: cfg, dir: t.TempDir()}
	if err := c.layOut([]int{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	s, err := nodeProperties(cfg, c.nodes[1], c.nodes)
	if err != nil {
		t.Fatal(err)
	}
	p := parseProps(t, s)
	for k, want := range map[string]string{
		"listeners":                      "PLAINTEXT://127.0.0.1:3,CONTROLLER://127.0.0.1:4",
		"advertised.listeners":           "PLAINTEXT://127.0.0.1:3",
		"inter.broker.listener.name":     "PLAINTEXT",
		"controller.listener.names":      "CONTROLLER",
		"controller.quorum.voters":       "1@127.0.0.1:2,2@127.0.0.1:4,3@127.0.0.1:6",
		"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
	} {
		if p[k] != want {
			t.Errorf("%s=%s, want %s", k, p[k], want)
		}
	}
}
