# SPDX-License-Identifier: Apache-2.0
"""Opens the dashboard's one-use URL in headless Chromium (Debian's chromium
and chromium-driver, through python3-selenium) and checks that the page
shows the job's rounds and sites, draws its curve on an accuracy axis of
[0, 1] with no console error, and lists the sites that train; saves a
screenshot.

usage: dashboard_browser.py URL JOB SCREENSHOT.png [PLAIN_JOB]
  PLAIN_JOB  a job without differential privacy that is done: its row shows
             its last round's sites, and its ε chart says why it is empty,
             in the words of `xfed job report`
"""
import re
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

DEADLINE_S = 120  # no load reaches it: the page polls every 2 s
# What `xfed job report` writes on an empty ε panel (job/jobprogress.h).
NO_EPSILON = "no \u03b5 reported: the job has no differential privacy"
TRAIN_LOSS_KEPT = "kept at the sites"
RUNNING_SITES = re.compile(r"^\d+ invited, \d+ accepted, \d+ reported$|"
                           r"^\d+ invited, \d+ reported in round \d+$")

# Reads the page at once: it redraws its tables on every poll, so elements
# found one call apart may be gone.
READ = """
const q = s => Array.from(document.querySelectorAll(s));
const cells = r => Array.from(r.cells).map(c => c.innerText);
const a = document.getElementById('audit');
const c = Chart.getChart('chart-accuracy');
let drawn = 0;
if (c) {
  const pts = c.data.datasets[0].data.filter(v => v !== null).length;
  const cv = document.getElementById('chart-accuracy');
  const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
  let inked = 0; for (let i = 3; i < px.length; i += 4) if (px[i]) inked++;
  drawn = pts >= 1 && inked > 2000 ? pts : 0;
}
const note = document.getElementById('note-epsilon');
return {rounds: q('#rounds tbody tr').length,
        jobs: q('#jobs tbody tr').map(cells),
        sites: q('#sites tbody tr').map(cells),
        audit: a ? a.innerText : '',
        curves: document.getElementById('curves-job').innerText,
        drawn: drawn,
        y: c ? [c.scales.y.min, c.scales.y.max] : null,
        epsilon_note: note && !note.hidden ? note.innerText : null};
"""


def job_row(seen, job):
    return next((r for r in seen["jobs"] if r and r[0] == job), None)


def sites_ok(seen):
    """Both sites, each with its fmnist dataset."""
    names = {r[0]: r for r in seen["sites"] if r}
    return all(s in names and "fmnist" in names[s][3] for s in ("s1", "s2"))


def main():
    url, job, shot = sys.argv[1], sys.argv[2], sys.argv[3]
    plain = sys.argv[4] if len(sys.argv) > 4 else None
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1700"):
        opts.add_argument(a)
    # The coordinator's certificate names it by SPIFFE ID, not by address.
    opts.accept_insecure_certs = True
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        driver.get(url)
        end = time.monotonic() + DEADLINE_S
        want = plain or job
        seen = {}
        while time.monotonic() < end:
            seen = driver.execute_script(READ)
            row = job_row(seen, job)
            ok = (row is not None and seen["drawn"] and "chain intact" in seen["audit"] and
                  sites_ok(seen) and seen["y"] == [0, 1] and
                  RUNNING_SITES.match(row[4]) and row[6] == TRAIN_LOSS_KEPT)
            if plain:
                prow = job_row(seen, plain)
                if prow is not None and seen["curves"] != "job " + plain:
                    driver.execute_script(
                        "document.querySelector('#jobs tr.job[data-job=\"' + arguments[0] + "
                        "'\"]').click();", plain)
                ok = (ok and prow is not None and prow[4] == "2 invited, 2 reported in round 2"
                      and seen["curves"] == "job " + plain and seen["epsilon_note"] == NO_EPSILON)
            else:
                # The policy's classification of each dataset, on the sites' rows.
                ok = (ok and seen["rounds"] >= 2 and seen["curves"] == "job " + want and
                      all("fmnist (internal)" in r[3] for r in seen["sites"] if r))
            if ok:
                break
            time.sleep(0.5)
        else:
            sys.exit(f"after {DEADLINE_S} s the page shows {seen!r}")
        driver.save_screenshot(shot)
        severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        if severe:
            sys.exit("console errors: " + "; ".join(e.get("message", "") for e in severe))
        print(f"page: job {want} with {seen['rounds']} rounds, curve of {seen['drawn']} points "
              f"on [0, 1], audit shown, sites {[r[0] for r in seen['sites']]}"
              + (f", ε note {seen['epsilon_note']!r}" if plain else ""))
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
