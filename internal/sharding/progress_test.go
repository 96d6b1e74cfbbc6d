package sharding_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	locksv1 "github.com/turnstile-dev/turnstile/api/v1alpha1"
	"github.com/turnstile-dev/turnstile/internal/lockkey"
)

var _ = Describe("Backups and a working owner", func() {
	It("leave a key alone while its owner is seen deciding it, and decide it once that stops", func() {
		// The backup delay is long against the owner's writes (every 50 ms), so only a stall
		// of a whole second in them would let the backup in early.
		const backup = time.Second
		ns := newNamespace()
		r := startReplica("r", ns, backup)
		startGhost("owner", ns)
		all := []string{"owner", "r"}
		Eventually(liveOf(r), timeout, interval).Should(Equal(all))

		t := keyOwnedBy(ns, "owner", all)
		Expect(k8s.Create(ctx, request(ns, "a", t))).To(Succeed())
		Eventually(phase(ns, "a"), timeout, interval).Should(Equal(locksv1.PhaseGranted), "nobody decides the key: the backup does")

		// The test plays an owner at work: it writes the key's ProjectLock status (a condition
		// no controller writes) as fast as a busy key's decisions come.
		writing, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(stopped)
			key := client.ObjectKey{Namespace: ns, Name: lockkey.Name(t)}
			for n := 0; ; n++ {
				select {
				case <-writing:
					return
				case <-time.After(50 * time.Millisecond):
				}
				var pl locksv1.ProjectLock
				if err := k8s.Get(ctx, key, &pl); err != nil {
					continue
				}
				meta.SetStatusCondition(&pl.Status.Conditions, metav1.Condition{Type: "OwnerAtWork", Status: metav1.ConditionTrue,
					Reason: "Deciding", Message: time.Now().Format(time.RFC3339Nano)})
				if err := k8s.Status().Update(ctx, &pl); err != nil && !apierrors.IsConflict(err) {
					Expect(err).NotTo(HaveOccurred())
				}
			}
		}()
		DeferCleanup(func() {
			select {
			case <-writing:
			default:
				close(writing)
			}
			<-stopped
		})

		lr := request(ns, "b", t)
		lr.Spec.Holder.Owner = "bob"
		Expect(k8s.Create(ctx, lr)).To(Succeed())
		Consistently(phase(ns, "b"), 3*time.Second, interval).Should(BeEmpty(), "a backup leaves a new waiter to the owner that is deciding its key")

		close(writing)
		<-stopped
		Eventually(phase(ns, "b"), timeout, interval).Should(Equal(locksv1.PhasePending), "once the owner stops, the backup decides the key")
	})
})
