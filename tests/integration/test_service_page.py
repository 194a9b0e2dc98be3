"""The page at ``GET /``, in a real headless browser (Chromium through selenium) against a live server.

Marked ``browser``: not in the default run (``make test-browser`` runs it, installing Chromium where it can).
Asked for with ``-m browser`` on a machine without Chromium, it fails and says how to install it.
"""

import os
import shutil
import socket
import threading
import time

import pytest
import uvicorn

from fairseq_speaker.service.app import create_app
from fairseq_speaker.serving import SpeakerTranslator
from tests.cli import doctored_checkpoint

pytestmark = pytest.mark.browser

TOKEN = "page-test-token-0123456789"
HOW_TO_INSTALL = ("the browser tests need Chromium and its driver: on Debian or Ubuntu `apt-get install -y chromium "
                  "chromium-driver` (as root; `make test-browser` does it when it can), and selenium (`pip install -e "
                  "'.[test]'`)")


def _browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail(f"selenium is not installed: {HOW_TO_INSTALL}")
    binary = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        pytest.fail(f"{'chromium' if binary is None else 'chromedriver'} not found on PATH: {HOW_TO_INSTALL}")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,900"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.fixture
def server(toy, trained, tmp_path):
    """A live service on 127.0.0.1 of a full-bias model whose spk000 and spk001 each favour a word."""
    checkpoint = doctored_checkpoint(trained("lstm_full_bias"), str(tmp_path / "doctored.pt"),
                                     {"spk000": "chien", "spk001": "voiture"}, os.path.join(toy["bin"], "dict.fr.txt"))
    translator = SpeakerTranslator.from_pretrained(checkpoint, data=toy["bin"], max_len_b=6)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(translator, token=TOKEN)
    uvicorn_server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uvicorn_server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uvicorn_server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    uvicorn_server.should_exit = True
    thread.join(timeout=30)


def _post(url, body, headers=None):
    import httpx

    response = httpx.post(url, json=body, headers=headers or {}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_page_onboards_a_speaker_and_shows_the_apis_translations(server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser = _browser()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(server + "/")
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#speakers-list li")) == 8)

        browser.find_element(By.ID, "onboard-name").send_keys("dr-lee")
        browser.find_element(By.ID, "onboard-token").send_keys(TOKEN)
        browser.find_element(By.ID, "onboard-sources").send_keys("i am tired .\nyou want the drugs .")
        browser.find_element(By.ID, "onboard-targets").send_keys("je suis fatiguée .\nvous voulez les médicaments .")
        browser.find_element(By.ID, "onboard").click()
        wait.until(lambda b: b.find_element(By.ID, "fit-report").is_displayed()
                   or b.find_element(By.ID, "onboard-error").text)
        assert browser.find_element(By.ID, "onboard-error").text == ""
        report = {dd.get_attribute("data-key"): dd.text
                  for dd in browser.find_elements(By.CSS_SELECTOR, "#fit-report dd")}
        assert report["speaker"] == "dr-lee" and report["sentences"] == "2"
        assert float(report["loss after"]) < float(report["loss before"])
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#speakers-list li")) == 9)

        sentences = ["i am tired .", "you want the drugs ."]
        speakers = ["dr-lee", "spk000", "spk001"]
        box = browser.find_element(By.ID, "sentences")
        box.clear()
        box.send_keys("\n".join(sentences))
        field = browser.find_element(By.ID, "speaker-input")
        field.clear()
        field.send_keys(", ".join(speakers))
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda b: b.find_element(By.ID, "results").is_displayed()
                   or b.find_element(By.ID, "translate-error").text)
        assert browser.find_element(By.ID, "translate-error").text == ""
        shown = {(cell.get_attribute("data-speaker"), int(cell.get_attribute("data-sentence"))):
                 cell.find_element(By.CLASS_NAME, "text").text
                 for cell in browser.find_elements(By.CSS_SELECTOR, "#results td.translation")}
        marks = {(cell.get_attribute("data-speaker"), int(cell.get_attribute("data-sentence"))):
                 [mark.text for mark in cell.find_elements(By.TAG_NAME, "mark")]
                 for cell in browser.find_elements(By.CSS_SELECTOR, "#results td.translation")}
        browser.save_screenshot(str(tmp_path / "service_page.png"))
        if os.environ.get("SERVICE_PAGE_SCREENSHOT"):  # the one in docs/img, made with this test
            shutil.copy(tmp_path / "service_page.png", os.environ["SERVICE_PAGE_SCREENSHOT"])
    finally:
        browser.quit()

    for speaker in speakers:
        api = _post(server + "/translate", {"sentences": sentences, "speaker": speaker})["translations"]
        assert [shown[(speaker, i)] for i in range(len(sentences))] == [t["text"] for t in api]
    assert all(shown[("spk000", i)].split()[0] == "chien" for i in range(2))
    assert all(shown[("spk001", i)].split()[0] == "voiture" for i in range(2))
    for (speaker, i), words in marks.items():  # highlighted: the words where a speaker differs from the first
        assert bool(words) == (shown[(speaker, i)] != shown[(speakers[0], i)]), (speaker, i)
        assert all(word in shown[(speaker, i)].split() for word in words)
    assert all("voiture" in marks[("spk001", i)] for i in range(2) if "voiture" not in shown[("dr-lee", i)].split())
    assert (tmp_path / "service_page.png").stat().st_size > 10_000


def test_the_api_description_pages_render_with_nothing_but_the_services_files(server):
    """/docs and /redoc in a real browser: Swagger UI lists every endpoint and ReDoc shows their summaries, every file
    either page loaded came from the service (these machines reach no CDN: a page that needed one stays blank), and
    the one thing ReDoc asks of another site (its maker's logo) is blocked by the page's policy, never fetched."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser = _browser()
    try:
        wait = WebDriverWait(browser, 60)
        browser.get(server + "/docs")
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")) >= 8)
        listed = {e.get_attribute("data-path") for e in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
        loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        icon = browser.execute_script("return document.querySelector('link[rel~=icon]').href")
        browser.get(server + "/redoc")
        wait.until(lambda b: "Translate each sentence as its speaker" in b.find_element(By.TAG_NAME, "body").text)
        loaded += browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
        blocked = " ".join(entry["message"] for entry in browser.get_log("browser")
                           if "violates the following Content Security Policy" in entry["message"])
    finally:
        browser.quit()
    assert listed == {"/translate", "/speakers", "/speakers/{name}", "/speakers/{name}/sentences", "/health",
                      "/metrics"}, listed
    assert any(url.endswith("/docs/static/redoc.standalone.js") for url in loaded)
    elsewhere = [url for url in loaded if not url.startswith(server + "/")]  # ReDoc's maker's logo: never fetched
    assert all(f"'{url}'" in blocked for url in elsewhere), (elsewhere, blocked)
    assert icon == server + "/favicon.ico"
