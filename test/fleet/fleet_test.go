package fleet

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// hold is one client's record of one grant: when it saw Granted (kubectl wait returned), the
// token it read, and when it sent its release. The grant's real interval on the hub contains
// [seen, released], so two records that overlap are two holders at once.
type hold struct {
	who            string
	token          int64
	seen, released time.Time
}

var _ = Describe("A fleet", Ordered, func() {
	// Four clients, two in each spoke, each applying LockRequests on one key with kubectl,
	// waiting with kubectl wait --for=condition=Granted, reading the token, releasing.
	It("serializes LockRequests on one key in two spokes: tokens rise across clusters, holdings never overlap", func() {
		const clients, rounds = 4, 3
		var (
			mu    sync.Mutex
			holds []hold
			wg    sync.WaitGroup
			errs  = make(chan error, clients)
		)
		for c := range clients {
			spoke := []*member{spokeA, spokeB}[c%2]
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for r := range rounds {
					name := fmt.Sprintf("serial-%d-%d", c, r)
					h, err := holdOnce(spoke, name, fmt.Sprintf("client-%d", c))
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					holds = append(holds, h)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(holds).To(HaveLen(clients * rounds))
		sort.Slice(holds, func(i, j int) bool { return holds[i].seen.Before(holds[j].seen) })
		for i := 1; i < len(holds); i++ {
			prev, cur := holds[i-1], holds[i]
			Expect(cur.seen.After(prev.released)).To(BeTrue(), "%s (token %d) saw its grant at %s, before %s (token %d) released at %s",
				cur.who, cur.token, cur.seen.Format(time.RFC3339Nano), prev.who, prev.token, prev.released.Format(time.RFC3339Nano))
			Expect(cur.token).To(BeNumerically(">", prev.token), "tokens must rise across clusters: %s got %d after %s's %d", cur.who, cur.token, prev.who, prev.token)
		}
		clusters := map[string]bool{}
		var record []string
		for _, h := range holds {
			clusters[strings.SplitN(h.who, "/", 2)[0]] = true
			record = append(record, fmt.Sprintf("%s token %d held %s", h.who, h.token, h.released.Sub(h.seen).Round(time.Millisecond)))
		}
		AddReportEntry("grants in order", strings.Join(record, "\n"))
		Expect(clusters).To(HaveLen(2), "both spokes held the key")
	})

	// One owner in two clusters is two holders: the hub tells them apart by spec.holder.cluster,
	// which the agent writes and the hub's cache must keep (a cache that dropped it made the two
	// one identity, and the second a re-entrant grant while the first held).
	It("keeps the same owner in two spokes apart: the second waits for the first", func() {
		for _, s := range []*member{spokeA, spokeB} {
			_, err := s.kubectl.Run(lockRequest("same-owner", "atlantis", "same-owner"), "apply", "-f", "-")
			Expect(err).NotTo(HaveOccurred())
			if s == spokeA {
				_, err = s.kubectl.Run("", "-n", ns, "wait", "--for=condition=Granted", "lockrequest/same-owner", "--timeout=60s")
				Expect(err).NotTo(HaveOccurred())
			}
		}
		By("spoke-b's request waits, blocked by the holder in spoke-a")
		Eventually(func(g Gomega) {
			out, err := spokeB.kubectl.Run("", "-n", ns, "get", "lockrequest", "same-owner", "-o", "jsonpath={.status.phase}|{.status.blockedBy}")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(Equal("Pending|locked by atlantis in spoke-a"))
		}).Should(Succeed())
		out, err := hub.kubectl.Run("", "-n", ns, "get", "lockrequest", "spoke-b.same-owner", "-o", "jsonpath={.status.phase}")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal("Pending"))
		tokenA, err := spokeA.kubectl.Run("", "-n", ns, "get", "lockrequest", "same-owner", "-o", "jsonpath={.status.fencingToken}")
		Expect(err).NotTo(HaveOccurred())

		By("releasing in spoke-a hands the key to spoke-b, with a higher token")
		_, err = spokeA.kubectl.Run("", "-n", ns, "patch", "lockrequest", "same-owner", "--type=merge", "-p", `{"spec":{"release":true}}`)
		Expect(err).NotTo(HaveOccurred())
		_, err = spokeB.kubectl.Run("", "-n", ns, "wait", "--for=condition=Granted", "lockrequest/same-owner", "--timeout=60s")
		Expect(err).NotTo(HaveOccurred())
		tokenB, err := spokeB.kubectl.Run("", "-n", ns, "get", "lockrequest", "same-owner", "-o", "jsonpath={.status.fencingToken}")
		Expect(err).NotTo(HaveOccurred())
		Expect(strconv.ParseInt(tokenB, 10, 64)).To(BeNumerically(">", mustInt(tokenA)))
	})

	It("restarts an agent that loses and doubles nothing", func() {
		for _, n := range []string{"restart-kept", "restart-deleted"} {
			_, err := spokeA.kubectl.Run(lockRequest(n, "dana", "restart/"+n), "apply", "-f", "-")
			Expect(err).NotTo(HaveOccurred())
			_, err = spokeA.kubectl.Run("", "-n", ns, "wait", "--for=condition=Granted", "lockrequest/"+n, "--timeout=60s")
			Expect(err).NotTo(HaveOccurred())
		}
		before := hubUIDs(spokeA.name)
		By("stopping spoke-a's manager (SIGTERM), deleting one request and making another while it is away")
		Expect(spokeA.manager.Stop(15 * time.Second)).To(Succeed())
		_, err := spokeA.kubectl.Run("", "-n", ns, "delete", "lockrequest", "restart-deleted")
		Expect(err).NotTo(HaveOccurred())
		_, err = spokeA.kubectl.Run(lockRequest("restart-new", "dana", "restart/new"), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		spokeA.start()
		_, err = spokeA.kubectl.Run("", "-n", ns, "wait", "--for=condition=Granted", "lockrequest/restart-new", "--timeout=60s")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			after := hubUIDs(spokeA.name)
			spoke := spokeUIDs(spokeA)
			// Every spoke request once on the hub, and nothing else of spoke-a's there.
			g.Expect(after).To(HaveLen(len(spoke)))
			for name, uid := range spoke {
				g.Expect(after).To(HaveKeyWithValue(spokeA.name+"."+name, uid))
			}
			g.Expect(after).NotTo(HaveKey(spokeA.name + ".restart-deleted"))
		}).Should(Succeed())
		Expect(hubUIDs(spokeA.name)).To(HaveKeyWithValue(spokeA.name+".restart-kept", before[spokeA.name+".restart-kept"]))
	})
})

// holdOnce applies a LockRequest in spoke, waits for its grant with kubectl wait, reads its
// token, and releases it; it returns the client's record.
func holdOnce(spoke *member, name, owner string) (hold, error) {
	k := spoke.kubectl
	if _, err := k.Run(lockRequest(name, owner, "vpc"), "apply", "-f", "-"); err != nil {
		return hold{}, err
	}
	if _, err := k.Run("", "-n", ns, "wait", "--for=condition=Granted", "lockrequest/"+name, "--timeout=120s"); err != nil {
		return hold{}, err
	}
	seen := time.Now()
	out, err := k.Run("", "-n", ns, "get", "lockrequest", name, "-o", "jsonpath={.status.phase} {.status.fencingToken}")
	if err != nil {
		return hold{}, err
	}
	var phase string
	var token int64
	if _, err := fmt.Sscanf(out, "%s %d", &phase, &token); err != nil {
		return hold{}, fmt.Errorf("lockrequest %s in %s after its grant: %q: %w", name, spoke.name, out, err)
	}
	if phase != "Granted" {
		return hold{}, fmt.Errorf("lockrequest %s in %s after its grant: %q, not Granted", name, spoke.name, out)
	}
	released := time.Now()
	if _, err := k.Run("", "-n", ns, "patch", "lockrequest", name, "--type=merge", "-p", `{"spec":{"release":true}}`); err != nil {
		return hold{}, err
	}
	if _, err := k.Run("", "-n", ns, "wait", "--for=jsonpath={.status.phase}=Released", "lockrequest/"+name, "--timeout=60s"); err != nil {
		return hold{}, err
	}
	return hold{who: spoke.name + "/" + name, token: token, seen: seen, released: released}, nil
}

// hubUIDs are the hub requests of cluster in ns, by name, with the spoke UID each mirrors.
func hubUIDs(cluster string) map[string]string {
	GinkgoHelper()
	return uids(hub, "-l", "fleet.turnstile.dev/cluster="+cluster, "-o", `jsonpath={range .items[*]}{.metadata.name}={.metadata.annotations.fleet\.turnstile\.dev/spoke-uid}{"\n"}{end}`)
}

// spokeUIDs are the requests of spoke in ns, by name, with their UIDs.
func spokeUIDs(spoke *member) map[string]string {
	GinkgoHelper()
	return uids(spoke, "-o", `jsonpath={range .items[*]}{.metadata.name}={.metadata.uid}{"\n"}{end}`)
}

func uids(m *member, args ...string) map[string]string {
	GinkgoHelper()
	out, err := m.kubectl.Run("", append([]string{"-n", ns, "get", "lockrequests"}, args...)...)
	Expect(err).NotTo(HaveOccurred())
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, uid, ok := strings.Cut(line, "="); ok {
			got[name] = uid
		}
	}
	return got
}

func mustInt(s string) int64 {
	GinkgoHelper()
	n, err := strconv.ParseInt(s, 10, 64)
	Expect(err).NotTo(HaveOccurred())
	return n
}
