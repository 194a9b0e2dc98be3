"""The page at ``GET /``, in a real headless browser (Chromium through selenium) against a live server.

Marked ``browser``: not in the default run (``make test-browser`` runs it, installing Chromium where it can).
Asked for with ``-m browser`` on a machine without Chromium, it fails and says how to install it.
"""

import os
import re
import shutil
import socket
import threading
import time

import pytest
import uvicorn

from fairseq_speaker.service.app import create_app
from fairseq_speaker.service.speaker_service import Limits
from fairseq_speaker.serving import SpeakerTranslator
from tests.cli import doctored_checkpoint, run
from tests.toy_kinds import attach_gender_kinds, genders

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
def serve():
    """A function (translator, limits) -> the URL of a live service on 127.0.0.1; every one stopped at the end."""
    started = []

    def start(translator, limits=Limits()):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        app = create_app(translator, token=TOKEN, limits=limits)
        uvicorn_server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=uvicorn_server.run, daemon=True)
        thread.start()
        started.append((uvicorn_server, thread))
        deadline = time.monotonic() + 30
        while not uvicorn_server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        return f"http://127.0.0.1:{port}"

    yield start
    for uvicorn_server, thread in started:
        uvicorn_server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture
def doctored(toy, trained, tmp_path):
    """A full-bias model whose spk000 and spk001 each favour a word."""
    checkpoint = doctored_checkpoint(trained("lstm_full_bias"), str(tmp_path / "doctored.pt"),
                                     {"spk000": "chien", "spk001": "voiture"}, os.path.join(toy["bin"], "dict.fr.txt"))
    return SpeakerTranslator.from_pretrained(checkpoint, data=toy["bin"], max_len_b=6)


@pytest.fixture
def server(serve, doctored):
    return serve(doctored)


def _get(url):
    import httpx

    response = httpx.get(url, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _text(url):
    import httpx

    return httpx.get(url, timeout=30).text


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
        speakers = ["dr-lee", "spk000", "spk001"]  # dr-lee chosen by its onboarding, the others ticked in the list
        box = browser.find_element(By.ID, "sentences")
        box.clear()
        box.send_keys("\n".join(sentences))
        search = browser.find_element(By.ID, "speaker-search")
        for query, name in (("SPK000", "spk000"), ("1", "spk001")):  # a search shows the speakers it matches
            search.clear()
            search.send_keys(query)
            visible = [li for li in browser.find_elements(By.CSS_SELECTOR, "#speakers-list li") if li.is_displayed()]
            assert [li.get_attribute("data-name") for li in visible] == [name]
            visible[0].find_element(By.CSS_SELECTOR, "input.pick").click()
        search.clear()
        search.send_keys("spk")
        assert len([li for li in browser.find_elements(By.CSS_SELECTOR, "#speakers-list li") if li.is_displayed()]) == 8
        assert [chip.get_attribute("data-name") for chip in browser.find_elements(By.CSS_SELECTOR, "#chosen .chip")] \
            == speakers
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
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")) >= 9)
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
    assert listed == {"/translate", "/speakers", "/speakers/{name}", "/speakers/{name}/sentences", "/limits",
                      "/health", "/metrics", "/models", "/models/{model_id}", "/models/{model_id}/reload"}, listed
    assert any(url.endswith("/docs/static/redoc.standalone.js") for url in loaded)
    elsewhere = [url for url in loaded if not url.startswith(server + "/")]  # ReDoc's maker's logo: never fetched
    assert all(f"'{url}'" in blocked for url in elsewhere), (elsewhere, blocked)
    assert icon == server + "/favicon.ico"


def _shown(browser):
    from selenium.webdriver.common.by import By

    return [li.get_attribute("data-name") for li in browser.find_elements(By.CSS_SELECTOR, "#speakers-list li")
            if li.is_displayed()]


def test_the_page_shows_what_each_speakers_words_suggest_and_finds_speakers_by_it(serve, toy, trained, tmp_path):
    """A model that remembers its speakers' words, with the toy's gender as kinds of speaker (tests/toy_kinds.py): each
    speaker in the list shows the words of its own gender (speakers.tsv says which), as GET /speakers has them; a
    search for a feminine word shows the women alone, and "Tick those shown" chooses them."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    remembering = str(tmp_path / "words.pt")
    run("fairseq-speaker-words", [toy["bin"], "--path", trained("lstm_fact_bias"), "--save", remembering,
                                  "--threads", "1", "--calibrate", "off"])
    translator = SpeakerTranslator.from_pretrained(remembering, data=toy["bin"], max_len_b=6)
    words = attach_gender_kinds(translator)
    gender = genders(toy["raw"])
    server = serve(translator)
    browser = _browser()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(server + "/")
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#speakers-list li .trait")) == 8)
        traits = {li.get_attribute("data-name"): [(t.get_attribute("data-trait"), t.get_attribute("data-words"), t.text)
                                                  for t in li.find_elements(By.CSS_SELECTOR, ".trait")]
                  for li in browser.find_elements(By.CSS_SELECTOR, "#speakers-list li")}
        assert browser.find_element(By.ID, "traits-note").is_displayed()
        search = browser.find_element(By.ID, "speaker-search")
        search.send_keys(words["f"][0])
        women = _shown(browser)
        browser.find_element(By.ID, "pick-shown").click()
        chips = [chip.get_attribute("data-name") for chip in browser.find_elements(By.CSS_SELECTOR, "#chosen .chip")]
        search.clear()
        search.send_keys("Trained")
        everyone = _shown(browser)
    finally:
        browser.quit()
    api = {s["name"]: s["traits"] for s in _get(server + "/v1/speakers")["speakers"]}
    for name, shown in traits.items():
        ((trait, said, text),) = shown
        assert set(said.split()) <= set(words[gender[name]]) and said.split(), (name, said)
        assert (trait, said.split()) == (str(api[name][0]["trait"]), api[name][0]["words"])
        assert text.endswith(f"({round(100 * api[name][0]['probability'])}%)"), text
    assert women == chips == [name for name in sorted(gender) if gender[name] == "f"]
    assert everyone == sorted(gender)


def test_the_page_splits_what_it_sends_to_the_services_limits_and_says_what_it_cannot_send(serve, doctored):
    """A service taking 3 sentences a request, 40 characters a sentence and 2 pairs an onboarding: 4 sentences as 3
    speakers (one typed, unknown) go in 4 requests, every translation as the API gives it, no request refused; a line
    over 40 characters is named before anything is sent; 5 pairs onboard a speaker in 3 requests, fitted on all 5."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = serve(doctored, Limits(max_sentences=3, max_chars=40, max_pairs=2))
    sentences = ["i am tired .", "you want the drugs .", "i went to the station .", "you are kind ."]
    speakers = ["spk000", "spk001", "nobody"]
    sources = sentences + ["i am ready ."]
    targets = ["je suis fatiguée .", "vous voulez les médicaments .", "je suis allée à la gare .",
               "vous êtes gentille .", "je suis prête ."]
    browser = _browser()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(server + "/")
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#speakers-list li")) == 8)
        for name in speakers[:2]:
            browser.find_element(By.CSS_SELECTOR, f'#speakers-list li[data-name="{name}"] input.pick').click()
        browser.find_element(By.ID, "speaker-input").send_keys(speakers[2])
        browser.find_element(By.ID, "add-speaker").click()
        box = browser.find_element(By.ID, "sentences")
        box.clear()
        box.send_keys("\n".join(sentences))
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda b: b.find_element(By.ID, "results").is_displayed()
                   or b.find_element(By.ID, "translate-error").text)
        assert browser.find_element(By.ID, "translate-error").text == ""
        progress = browser.find_element(By.ID, "translate-progress").text
        shown = {(cell.get_attribute("data-speaker"), int(cell.get_attribute("data-sentence"))):
                 cell.find_element(By.CLASS_NAME, "text").text
                 for cell in browser.find_elements(By.CSS_SELECTOR, "#results td.translation")}
        unknown = [cell.get_attribute("data-speaker") for cell in
                   browser.find_elements(By.CSS_SELECTOR, "#results td.translation") if cell.find_elements(
                       By.CLASS_NAME, "policy")]
        metrics = _text(server + "/metrics")

        box.send_keys("\n" + " ".join(["i am tired ."] * 4))  # 51 characters
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda b: b.find_element(By.ID, "translate-error").text)
        too_long = browser.find_element(By.ID, "translate-error").text
        after = _text(server + "/metrics")

        browser.find_element(By.ID, "onboard-name").send_keys("dr-lee")
        browser.find_element(By.ID, "onboard-token").send_keys(TOKEN)
        browser.find_element(By.ID, "onboard-sources").send_keys("\n".join(sources))
        browser.find_element(By.ID, "onboard-targets").send_keys("\n".join(targets))
        browser.find_element(By.ID, "onboard").click()
        wait.until(lambda b: b.find_element(By.ID, "fit-report").is_displayed()
                   or b.find_element(By.ID, "onboard-error").text)
        assert browser.find_element(By.ID, "onboard-error").text == ""
        report = {dd.get_attribute("data-key"): dd.text
                  for dd in browser.find_elements(By.CSS_SELECTOR, "#fit-report dd")}
        onboarding = browser.find_element(By.ID, "onboard-progress").text
    finally:
        browser.quit()

    for speaker in speakers:
        api = [t["text"] for s in (sentences[:2], sentences[2:])
               for t in _post(server + "/translate", {"sentences": s, "speaker": speaker})["translations"]]
        assert [shown[(speaker, i)] for i in range(len(sentences))] == api, speaker
    assert unknown == ["nobody"] * len(sentences)
    assert progress == "12 translations in 4 requests"
    assert re.search(r'_requests_total\{endpoint="/translate",method="POST",status="200",model="default"\} 4\b',
                     metrics), metrics
    assert not re.search(r"^fairseq_speaker_errors_total\{", metrics, re.MULTILINE), metrics  # nothing refused
    assert "Line 5 has 51 characters" in too_long and "--max-chars" in too_long, too_long
    assert re.findall(r'endpoint="/translate",method="POST".*', after) == re.findall(
        r'endpoint="/translate",method="POST".*', metrics)  # nothing sent
    assert report["speaker"] == "dr-lee" and report["sentences"] == "5"
    assert onboarding == "5 pairs in 3 requests (at most 2 a request)"
    assert _get(server + "/v1/speakers/dr-lee")["sentences"] == 5


def test_the_page_of_several_models_translates_shows_and_onboards_the_speakers_of_the_model_chosen(serve, doctored,
                                                                                                  toy, trained,
                                                                                                  tmp_path):
    """Two models whose spk000 favours different words: the page offers a choice of model (not offered with one
    model), translates with the model chosen, and onboards a speaker for it alone."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    other = doctored_checkpoint(trained("lstm_full_bias"), str(tmp_path / "other.pt"),
                                {"spk000": "voiture", "spk001": "chien"}, os.path.join(toy["bin"], "dict.fr.txt"))
    server = serve({"default": doctored, "other": SpeakerTranslator.from_pretrained(other, data=toy["bin"],
                                                                                  max_len_b=6)})
    alone = serve(doctored)
    browser = _browser()
    try:
        wait = WebDriverWait(browser, 30)
        browser.get(alone + "/")
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#speakers-list li")) == 8)
        assert not browser.find_element(By.ID, "model-choice").is_displayed()

        browser.get(server + "/")
        wait.until(lambda b: b.find_element(By.ID, "model-choice").is_displayed())
        Select(browser.find_element(By.ID, "model")).select_by_visible_text("other")
        wait.until(lambda b: b.find_element(By.ID, "speakers-list").get_attribute("data-model") == "other")
        browser.find_element(By.CSS_SELECTOR, '#speakers-list li[data-name="spk000"] input.pick').click()
        box = browser.find_element(By.ID, "sentences")
        box.clear()
        box.send_keys("i am tired .")
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda b: b.find_element(By.ID, "results").is_displayed()
                   or b.find_element(By.ID, "translate-error").text)
        assert browser.find_element(By.ID, "translate-error").text == ""
        shown = browser.find_element(By.CSS_SELECTOR, '#results td.translation[data-speaker="spk000"] .text').text

        browser.find_element(By.ID, "onboard-name").send_keys("dr-lee")
        browser.find_element(By.ID, "onboard-token").send_keys(TOKEN)
        browser.find_element(By.ID, "onboard-sources").send_keys("i am tired .")
        browser.find_element(By.ID, "onboard-targets").send_keys("je suis fatiguée .")
        browser.find_element(By.ID, "onboard").click()
        wait.until(lambda b: b.find_element(By.ID, "fit-report").is_displayed()
                   or b.find_element(By.ID, "onboard-error").text)
        assert browser.find_element(By.ID, "onboard-error").text == ""
    finally:
        browser.quit()
    assert shown.split()[0] == "voiture"
    assert shown == _post(server + "/translate", {"model": "other", "sentences": ["i am tired ."],
                                                  "speaker": "spk000"})["translations"][0]["text"]
    import httpx

    assert _get(server + "/speakers/dr-lee?model=other")["sentences"] == 1
    assert httpx.get(server + "/speakers/dr-lee", timeout=30).status_code == 404
