"""fs-scan's registry probe: which looked-up values name files missing from the app tree."""
from lockdown.remediation.registry_probe import file_index, is_missing


def _tree(tmp_path):
    app = tmp_path / "app"
    (app / "plugins" / "seo").mkdir(parents=True)
    (app / "plugins" / "seo" / "seo.php").write_text("<?php\n")
    (app / "sites" / "all" / "modules" / "views").mkdir(parents=True)
    (app / "sites" / "all" / "modules" / "views" / "views.module").write_text("<?php\n")
    return file_index(app)


def test_a_path_relative_to_the_registrys_own_directory_is_not_missing(tmp_path):
    # A plugin table stores 'seo/seo.php' relative to plugins/, not to the app root: the
    # file is there, and its row must not get a DELETE.
    index = _tree(tmp_path)
    assert not is_missing("seo/seo.php", index)
    assert not is_missing("./seo/seo.php", index)
    assert not is_missing("sites/all/modules/views/views.module", index)
    assert not is_missing("sites/all/modules/views", index)


def test_a_file_no_directory_holds_is_missing(tmp_path):
    index = _tree(tmp_path)
    assert is_missing("legacy-cache/legacy-cache.php", index)
    assert is_missing("sites/all/modules/devel/devel_generate.module", index)
    # a suffix must end at a directory boundary: 'eo/seo.php' is not 'seo/seo.php'
    assert is_missing("eo/seo.php", index)


def test_values_that_name_no_file_are_never_missing(tmp_path):
    index = _tree(tmp_path)
    assert not is_missing("Audit Blog", index)
    assert not is_missing("42", index)
    assert not is_missing("../outside/x.php", index)
    assert is_missing(str(tmp_path / "gone.php"), index)
    assert not is_missing(str(tmp_path / "app" / "plugins" / "seo" / "seo.php"), index)
