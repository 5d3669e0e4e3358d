"""Front ends that read other tools' algorithm formats into schedules."""
