package dlqui

import (
	"html"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

var (
	optionRE = regexp.MustCompile(`<option([^>]*)>([^<]*)</option>`)
	valueRE  = regexp.MustCompile(`value="([^"]*)"`)
)

// browserValue is what a browser sends for an <option>: its value attribute, or without one its
// text, ASCII whitespace stripped at both ends and collapsed inside (HTML's "strip and collapse
// ASCII whitespace").
func browserValue(attrs, text string) string {
	if m := valueRE.FindStringSubmatch(attrs); m != nil {
		return html.UnescapeString(m[1])
	}
	return strings.Join(strings.Fields(html.UnescapeString(text)), " ")
}

// Every pipeline a queue counts (its status, from the dead letters' pipeline header, which
// a producer writes) can be chosen from the queue page's pipeline list, and choosing it filters on
// that pipeline, not another one: not the real pipeline shop/orders for a header "shop/orders " or
// "shop/ orders" (the option's value is the counted pipeline whole). A header without '/' cannot be chosen by a filter on any surface (a bare name is the
// namespace's pipeline of that name): it is listed disabled, never under the real pipeline's text.
func TestEveryCountedPipelineCanBeChosen(t *testing.T) {
	for _, hostile := range []string{"other/orders", "a/b/c", "sh\u043ep/orders", "shop/", "/", "orders", "shop/orders ", "shop/ orders"} {
		t.Run(hostile, func(t *testing.T) {
			g := NewWithT(t)
			c := newConsole(t)
			c.fake.mu.Lock()
			ls := c.fake.letters["orders-dlq"]
			for i := 0; i < len(ls); i += 3 {
				ls[i].Pipeline = hostile
			}
			c.fake.countLocked("orders-dlq")
			var counted, bare []string
			for _, p := range c.fake.queues["orders-dlq"].Status.Pipelines {
				if strings.Contains(p.Name, "/") {
					counted = append(counted, p.Name)
				} else {
					bare = append(bare, p.Name)
				}
			}
			c.fake.mu.Unlock()

			_, body := c.get("/queues/orders-dlq")
			_, sel, _ := strings.Cut(body, `id="f-pipeline">`)
			sel, _, _ = strings.Cut(sel, `</select>`)
			var chosen, disabled []string
			for _, m := range optionRE.FindAllStringSubmatch(sel, -1) {
				v := browserValue(m[1], m[2])
				if v == "" {
					continue
				}
				if strings.Contains(m[1], "disabled") {
					disabled = append(disabled, v)
					continue
				}
				c.get("/queues/orders-dlq?pipeline=" + url.QueryEscape(v))
				f := c.fake.filters[len(c.fake.filters)-1]
				chosen = append(chosen, string(f.Selector("shop").Pipelines[0]))
			}
			slices.Sort(chosen)
			slices.Sort(counted)
			g.Expect(chosen).To(Equal(counted), "the pipelines chosen through the list, then those the queue counts")
			g.Expect(disabled).To(Equal(bare), "the pipelines listed but not offered, then those counted without a namespace")
		})
	}
}

// A record the console's form cannot read is refused with a message of bounded size.
func TestParseRecordMessageIsBounded(t *testing.T) {
	g := NewWithT(t)
	_, err := ParseRecord(strings.Repeat("9", 1<<20) + "/0")
	g.Expect(err).To(HaveOccurred())
	g.Expect(len(err.Error())).To(BeNumerically("<", 256), "a message of %d bytes", len(err.Error()))
}
