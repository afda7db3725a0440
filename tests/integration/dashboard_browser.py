# SPDX-License-Identifier: Apache-2.0
"""Opens the dashboard's one-use URL in headless Chromium (Debian's chromium
and chromium-driver, through python3-selenium) and checks that the page
shows the job's rounds and draws its curve with no console error; saves a
screenshot.

usage: dashboard_browser.py URL JOB SCREENSHOT.png
"""
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

DEADLINE_S = 120  # no load reaches it: the page polls every 2 s


def main():
    url, job, shot = sys.argv[1], sys.argv[2], sys.argv[3]
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
        drawn = rounds = 0
        jobs, audit = [], ""
        while time.monotonic() < end:
            # One script reads the tables at once: the page redraws them on
            # every poll, so elements found one call apart may be gone.
            seen = driver.execute_script(
                "const q = s => Array.from(document.querySelectorAll(s));"
                "const a = document.getElementById('audit');"
                "return [q('#rounds tbody tr').length,"
                "        q('#jobs tbody tr').map(r => r.innerText),"
                "        a ? a.innerText : ''];")
            rounds, jobs, audit = seen[0], seen[1], seen[2]
            # Points Chart.js holds, and pixels the canvas has painted.
            drawn = driver.execute_script(
                "const c = Chart.getChart('chart-accuracy');"
                "if (!c) return 0;"
                "const pts = c.data.datasets[0].data.filter(v => v !== null).length;"
                "const cv = document.getElementById('chart-accuracy');"
                "const px = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;"
                "let inked = 0; for (let i = 3; i < px.length; i += 4) if (px[i]) inked++;"
                "return pts >= 2 && inked > 2000 ? pts : 0;")
            if rounds >= 2 and drawn and any(j.split()[0] == job for j in jobs if j) and \
                    "chain intact" in audit:
                break
            time.sleep(0.5)
        else:
            sys.exit(f"after {DEADLINE_S} s: {rounds} rounds shown, curve points drawn "
                     f"{drawn}, jobs {jobs!r}, audit {audit!r}")
        sites = driver.execute_script("return document.getElementById('sites').innerText;")
        driver.save_screenshot(shot)
        severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        if severe:
            sys.exit("console errors: " + "; ".join(e.get("message", "") for e in severe))
        print(f"page: job {job} with {rounds} rounds, curve of {drawn} points, audit shown, "
              f"sites table {len(sites.splitlines())} lines")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
