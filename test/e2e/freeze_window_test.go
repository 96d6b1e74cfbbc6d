package e2e

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Freeze windows, with the real kubectl and the real manager's clock", func() {
	It("a window for the first 20 s of every minute holds a request inside it and grants it when it closes", SpecPriority(23), func() {
		ns := createNamespace()
		command := "win-" + randSuffix()
		DeferCleanup(func() { _, _ = kubectl("delete", "commandlock", command, "--ignore-not-found") })
		out := mustKubectl("turnstile", "freeze", command, "--new-command", "--window-name", "tick", "--schedule", "* * * * *", "--duration", "20s")
		Expect(out).To(ContainSubstring(fmt.Sprintf(`commandlock/%s window tick: Deny at "* * * * *" for 20s (UTC)`, command)))

		By("waiting until the window is open with at least 8 s to go, so the request surely arrives inside it")
		var closes time.Time
		Eventually(func() error {
			active, err := jsonpath("", "commandlock/"+command, "{.status.windows[0].state}/{.status.windows[0].nextTransition}")
			if err != nil {
				return err
			}
			var next string
			if _, err := fmt.Sscanf(active, "Open/%s", &next); err != nil {
				return fmt.Errorf("window not open: %q", active)
			}
			if closes, err = time.Parse(time.RFC3339, next); err != nil {
				return err
			}
			if time.Until(closes) < 8*time.Second {
				return fmt.Errorf("window closes too soon, at %s", closes)
			}
			return nil
		}).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		Expect(jsonpath("", "commandlock/"+command, conditionField("Locked", "reason"))).To(Equal("Window"))

		mustKubectl("turnstile", "-n", ns, "acquire", "-l", "acme/infra:app", "--command", command, "--name", "inside", "--no-wait")
		Eventually(field(ns, "lr/inside", conditionField("Granted", "message"))).WithTimeout(settle).WithPolling(poll).
			Should(HavePrefix("Win-" + command[4:] + " commands are frozen by window tick of commandlock " + command + ": Deny window in force until "))
		Expect(time.Now()).To(BeTemporally("<", closes), "the request was seen frozen before the window closed")

		By("the window closes: the manager's requeue thaws it and the request is granted")
		waitGranted(ns, "inside", 40*time.Second)
		granted, err := jsonpath(ns, "lr/inside", "{.status.grantedAt}")
		Expect(err).NotTo(HaveOccurred())
		at, err := time.Parse(time.RFC3339, granted)
		Expect(err).NotTo(HaveOccurred())
		Expect(at).NotTo(BeTemporally("<", closes.Add(-time.Second)), "granted at %s, before the window closed at %s", at, closes)
		Expect(jsonpath("", "commandlock/"+command, conditionField("Locked", "status"))).To(Equal("False"))

		By("thaw --window removes it")
		Expect(mustKubectl("turnstile", "thaw", command, "--window", "tick")).To(ContainSubstring("window tick removed"))
		Eventually(field("", "commandlock/"+command, "{.status.windows}")).WithTimeout(settle).WithPolling(poll).Should(BeEmpty())
	})
})
